"""Embedding cache under R2MED_HOME, keyed by content, written in chunks, resumable, memory-mapped.

``<root>/<key>/`` holds ``manifest.json`` (what the key was made of, the number of texts, the
chunk size, and the checksum of its own content) and ``chunk_00000.npy``, ``chunk_00001.npy``, ...
each written atomically as soon as it is encoded, followed by its checksum ``chunk_00000.npy.sha256``.
While a chunk is being encoded, what is finished of it is kept as parts ``chunk_00000.part0001.npz`` (the
positions in the chunk and their vectors, each with its checksum), written every ``flush_texts`` texts (512) or
``flush_seconds`` (60 s), whichever comes first, and at once on Ctrl-C; the finished chunk replaces its parts. A
run killed mid-corpus (Ctrl-C or SIGKILL) so loses at most the batch in flight and under a minute or 512 texts of
finished ones; the next run encodes only the texts that are missing. An encoder that sets ``chunks_per_call`` (the
multi-device encoder: one per device) is handed the missing texts of that many chunks at once, so that its workers
wait for each other once per call; each chunk is written as soon as it is complete, and the parts of the call's
chunks are written together, so the same bound holds. Parts are an addition within the same
format: a folder written with whole chunks only (4,096 texts, before parts existed) reads as before.
Every chunk is read through the verified reader (``r2med.io.verified``): a chunk that is damaged, or
whose checksum was never written, is encoded again with a warning; a damaged manifest starts the
folder again. The key hashes the encoder's ``cache_key`` (model id, revision, pooling, max length,
dtype, ...), the kind, the instruction text, the storage dtype, every text, and the format version:
never a name alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2med.batching import TextTooLongError
from r2med.errors import DamagedFileError
from r2med.io.atomic import remove_file
from r2med.io.progress import progress_bar
from r2med.io.verified import (
    file_identity,
    read_sidecar,
    read_verified,
    read_verified_json,
    remove_verified,
    sidecar,
    verify_file,
    write_verified,
    write_verified_json,
)
from r2med.retrievers.dense.base import Encoder, Kind, keyword_names, kind_label, kind_unit

logger = logging.getLogger(__name__)

FORMAT = "r2med-embeddings/1"
DEFAULT_CHUNK = 4096
#: finished texts kept in memory at most before they are written as a part of their chunk
FLUSH_TEXTS = 512
#: seconds between writes of a chunk's finished texts at most
FLUSH_SECONDS = 60.0


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 over the texts in order (length-prefixed, so boundaries count).

    >>> texts_digest(["ab", "c"]) != texts_digest(["a", "bc"])
    True
    """
    digest = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


def cache_key(encoder: Encoder, texts: Sequence[str], *, kind: Kind, instruction: str, dtype: str) -> tuple[str, dict]:
    """``(key, material)``: the directory name and everything it was derived from."""
    material = {
        "format": FORMAT,
        "encoder": encoder.cache_key(kind),
        "kind": kind,
        "instruction": instruction,
        "dtype": dtype,
        "n": len(texts),
        "texts": texts_digest(texts),
    }
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]
    return key, material


@dataclass(frozen=True)
class StoredEmbeddings:
    """Embeddings of ``n`` texts kept as chunk files; iterate blocks without loading them all."""

    directory: Path
    n: int
    chunk: int

    def chunk_path(self, i: int) -> Path:
        return self.directory / f"chunk_{i:05d}.npy"

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk)

    #: chunk index -> the file identity (device, inode, size, mtime) it had when its checksum was verified at lookup
    verified: dict[int, tuple[int, int, int, int]] = field(default_factory=dict, compare=False, repr=False)

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(offset, memory-mapped block)`` in text order; each chunk checked against its checksum first.

        A chunk verified at lookup and unchanged since (same file identity before and after loading it) is not
        hashed a second time.
        """
        for i in range(self.n_chunks):
            path = self.chunk_path(i)
            known = self.verified.get(i)
            if known is not None and _identity_of(path) == known:
                block = _load_chunk(path)
                if _identity_of(path) == known:
                    yield i * self.chunk, block
                    continue
            yield i * self.chunk, read_verified(path, _load_chunk)

    def array(self) -> np.ndarray:
        """All embeddings as one float32 array in memory."""
        return np.concatenate([np.asarray(b, dtype=np.float32) for _, b in self.blocks()]) if self.n else np.zeros((0, 0), np.float32)


class EmbeddingCache:
    """Encode texts through the cache rooted at ``root``; ``dtype`` is the storage type (float16 halves the disk)."""

    def __init__(self, root: Path, *, chunk: int = DEFAULT_CHUNK, dtype: str = "float32",
                 flush_texts: int = FLUSH_TEXTS, flush_seconds: float = FLUSH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        if flush_texts < 1 or not flush_seconds > 0:
            raise ValueError(f"flush_texts must be >= 1 and flush_seconds > 0, got {flush_texts}, {flush_seconds}")
        self.root = Path(root)
        self.chunk = chunk
        self.dtype = dtype
        self.flush_texts, self.flush_seconds, self.clock = flush_texts, flush_seconds, clock
        self.encoded_texts = 0  # texts actually sent to an encoder by this cache object

    def embed(
        self,
        encoder: Encoder,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
    ) -> StoredEmbeddings:
        """Embeddings of ``texts``, encoding only the chunks not already stored."""
        key, material = cache_key(encoder, texts, kind=kind, instruction=instruction, dtype=self.dtype)
        folder = self.root / key
        chunk = self._chunk_size(folder, material)
        stored = StoredEmbeddings(folder, len(texts), chunk)
        missing = self._missing(stored, kind)
        if not missing:
            logger.info("%s embeddings of %d texts found in the cache (%s)", kind, len(texts), folder)
            return stored
        if len(missing) < stored.n_chunks:
            logger.info("resuming: %d of %d chunks of %s embeddings are already stored", stored.n_chunks - len(missing), stored.n_chunks, kind)
        for path in folder.glob("chunk_*.part*.npz"):  # parts of chunks written since (a run killed in between)
            if int(path.name[len("chunk_"):].split(".", 1)[0]) not in missing:
                remove_verified(path)
        parts = {i: self._parts(stored, i, len(texts)) for i in missing}
        total = sum(min(chunk, len(texts) - i * chunk) - len(parts[i].rows) for i in missing)
        streams = accepts_keyword(encoder, "on_vectors")
        per_batch = streams or accepts_on_batch(encoder)
        # an encoder on several devices takes that many chunks per call: its workers wait for each other once per call
        group = max(1, int(getattr(encoder, "chunks_per_call", 1))) if streams else 1
        with progress_bar(total, desc=f"encoding {kind_label(kind)} ({encoder.name})", unit=kind_unit(kind),
                          enabled=progress) as bar:
            for g in range(0, len(missing), group):
                if group > 1:
                    self._encode_group(encoder, texts, stored, missing[g:g + group], parts, bar, kind=kind,
                                       instruction=instruction, batch_size=batch_size)
                    continue
                i = missing[g]
                start = i * chunk
                size = min(chunk, len(texts) - start)
                kept = parts[i]
                todo = [r for r in range(size) if r not in kept.rows]
                kept.last_flush = self.clock()
                # an encoder that hands each batch over (on_vectors) gets the chunk's missing texts at once (sorted
                # and batched as a whole); any other gets them in pieces of flush_texts, each kept when it returns
                pieces = [todo] if streams else [todo[k:k + self.flush_texts] for k in range(0, len(todo), self.flush_texts)]
                for piece in pieces:
                    if not piece:
                        continue
                    report = _ChunkReporter(bar, len(piece))
                    extra: dict[str, Any] = {"on_batch": report} if per_batch else {}
                    if streams:
                        extra["on_vectors"] = lambda rows, vectors, piece=piece: kept.add([piece[r] for r in rows], vectors)
                    try:
                        vectors = encoder.encode([texts[start + r] for r in piece], kind=kind, instruction=instruction,
                                                 batch_size=batch_size, progress=False, **extra)
                    except TextTooLongError as exc:
                        kept.flush()
                        raise exc.shifted(lambda j, piece=piece, start=start: start + piece[j]) from None
                    except BaseException:
                        kept.flush()  # Ctrl-C, a failing model: what is finished stays
                        raise
                    vectors = np.asarray(vectors, dtype=np.float32)
                    if vectors.shape[0] != len(piece):
                        raise ValueError(f"encoder {encoder.name} returned {vectors.shape[0]} vectors for {len(piece)} texts")
                    self.encoded_texts += len(piece)
                    kept.add(piece, vectors)  # what the encoder did not hand over batch by batch (rows it did: skipped)
                    if not streams:
                        kept.flush()
                    report.finish()  # an encoder without on_batch, or one that reported less: the rest now
                data = kept.assemble(size)
                write_verified(stored.chunk_path(i), lambda handle, data=data: np.save(handle, data, allow_pickle=False), binary=True)
                kept.remove()
        return stored

    def _encode_group(self, encoder: Encoder, texts: Sequence[str], stored: StoredEmbeddings, chunks: list[int],
                      parts: dict[int, _ChunkParts], bar: Any, **options: Any) -> None:
        """The missing texts of ``chunks`` in one call of a streaming encoder: each batch's vectors go to their
        chunk's parts as they come (all the group's parts written together every ``flush_texts`` texts or
        ``flush_seconds``), and each chunk is written as soon as it is complete."""
        n, chunk = stored.n, stored.chunk
        sizes = {i: min(chunk, n - i * chunk) for i in chunks}
        positions = [(i, r) for i in chunks for r in range(sizes[i]) if r not in parts[i].rows]  # (chunk, row)
        written: set[int] = set()
        flushed = [self.clock()]
        for i in chunks:
            parts[i].last_flush = flushed[0]

        def write(i: int) -> None:
            data = parts[i].assemble(sizes[i])
            write_verified(stored.chunk_path(i), lambda handle: np.save(handle, data, allow_pickle=False), binary=True)
            parts[i].remove()
            written.add(i)

        def take(rows: Sequence[int], vectors: np.ndarray) -> None:
            by_chunk: dict[int, tuple[list[int], list[int]]] = {}
            for k, row in enumerate(rows):
                i, r = positions[row]
                by_chunk.setdefault(i, ([], []))[0].append(r)
                by_chunk[i][1].append(k)
            for i, (local, ks) in by_chunk.items():
                parts[i].add(local, np.asarray(vectors)[ks])
                if i not in written and len(parts[i].rows) == sizes[i]:
                    write(i)
            if sum(parts[i].n_pending for i in chunks) >= self.flush_texts \
                    or self.clock() - flushed[0] >= self.flush_seconds:
                flushed[0] = self.clock()
                for i in chunks:
                    parts[i].flush()

        report = _ChunkReporter(bar, len(positions))
        try:
            if positions:
                vectors = encoder.encode([texts[i * chunk + r] for i, r in positions], progress=False,
                                         on_batch=report, on_vectors=take, **options)
                vectors = np.asarray(vectors, dtype=np.float32)
                if vectors.shape[0] != len(positions):
                    raise ValueError(f"encoder {encoder.name} returned {vectors.shape[0]} vectors for "
                                     f"{len(positions)} texts")
                self.encoded_texts += len(positions)
                take(range(len(positions)), vectors)  # rows not handed over batch by batch (those that were: skipped)
        except TextTooLongError as exc:
            for i in chunks:
                parts[i].flush()
            raise exc.shifted(lambda j: positions[j][0] * chunk + positions[j][1]) from None
        except BaseException:
            for i in chunks:
                parts[i].flush()  # Ctrl-C, a failing model or worker: what is finished stays
            raise
        for i in chunks:
            if i not in written:
                write(i)
        report.finish()

    def _parts(self, stored: StoredEmbeddings, i: int, n: int) -> _ChunkParts:
        """What earlier runs finished of chunk ``i`` (its verified parts; a damaged one is removed, with a warning)."""
        kept = _ChunkParts(stored.chunk_path(i), self.dtype, self.flush_texts, self.flush_seconds, self.clock)
        size = min(stored.chunk, n - i * stored.chunk)
        for path in sorted(stored.directory.glob(f"chunk_{i:05d}.part*.npz")):
            try:
                rows, vectors = read_verified(path, _load_part)
                if rows.ndim != 1 or vectors.ndim != 2 or len(rows) != len(vectors) or len(rows) == 0 \
                        or rows.min() < 0 or rows.max() >= size or str(vectors.dtype) != self.dtype:
                    raise DamagedFileError(path, f"does not hold positions of this chunk ({size} texts) and their "
                                                 f"{self.dtype} vectors")
                if kept.width is not None and vectors.shape[1] != kept.width:
                    raise DamagedFileError(path, f"holds vectors of width {vectors.shape[1]}, not {kept.width}")
            except DamagedFileError as exc:
                logger.warning("%s; encoding its texts again", exc)
                remove_verified(path)
                continue
            kept.load(path, rows, vectors)
        if kept.rows:
            logger.info("resuming chunk %d of %s: %d of its %d texts are already stored", i, stored.directory,
                        len(kept.rows), size)
        return kept

    def _chunk_size(self, folder: Path, material: dict) -> int:
        """The chunk size of ``folder`` from its manifest (written now when there is none; the folder is started
        again when the manifest is damaged or does not describe these texts)."""
        manifest = folder / "manifest.json"
        if manifest.is_file():
            try:
                recorded = read_verified_json(manifest)
                chunk = recorded.get("chunk")
                same = {k: v for k, v in recorded.items() if k != "chunk"} == json.loads(json.dumps(material))
                if not same or type(chunk) is not int or chunk < 1:
                    raise DamagedFileError(manifest, "does not match the texts and encoder of its key")
                return chunk
            except DamagedFileError as exc:
                logger.warning("%s; encoding these embeddings again", exc)
                for old in folder.glob("chunk_*"):
                    remove_file(old)
        write_verified_json(manifest, {**material, "chunk": self.chunk}, indent=1)
        return self.chunk

    @staticmethod
    def _missing(stored: StoredEmbeddings, kind: str) -> list[int]:
        """Chunks to encode: absent, or not matching their checksum (those are removed, with one warning)."""
        missing, damaged = [], []
        for i in range(stored.n_chunks):
            path = stored.chunk_path(i)
            if not path.is_file():
                missing.append(i)
                continue
            try:
                expected = read_sidecar(path)
                if expected is None:
                    raise DamagedFileError(path, f"has no checksum ({sidecar(path).name} is missing: its write was "
                                                 "interrupted, or an older r2med wrote it)")
                before = _identity_of(path)
                verify_file(path, expected)
                if before is not None and _identity_of(path) == before:
                    stored.verified[i] = before
            except DamagedFileError as exc:
                damaged.append(str(exc))
                remove_verified(path)
                missing.append(i)
        if damaged:
            logger.warning("%d of %d chunks of %s embeddings in %s cannot be used (%s%s); encoding them again",
                           len(damaged), stored.n_chunks, kind, stored.directory, damaged[0],
                           f"; and {len(damaged) - 1} more" if len(damaged) > 1 else "")
        return missing


class _ChunkParts:
    """The finished texts of one chunk: those read back from its parts, and new ones, written as a new part every
    ``flush_texts`` texts or ``flush_seconds`` (by ``clock``), whichever comes first."""

    def __init__(self, chunk_path: Path, dtype: str, flush_texts: int, flush_seconds: float,
                 clock: Callable[[], float]) -> None:
        self.chunk_path, self.dtype = chunk_path, dtype
        self.flush_texts, self.flush_seconds, self.clock = flush_texts, flush_seconds, clock
        self.rows: dict[int, np.ndarray] = {}  # position in the chunk -> its stored vector
        self.paths: list[Path] = []
        self.pending: list[tuple[list[int], np.ndarray]] = []
        self.n_pending = 0
        self.width: int | None = None
        self.last_flush = clock()

    def load(self, path: Path, rows: np.ndarray, vectors: np.ndarray) -> None:
        self.paths.append(path)
        self.width = vectors.shape[1]
        for row, vector in zip(rows.tolist(), vectors):
            self.rows[row] = vector

    def add(self, rows: list[int], vectors: np.ndarray) -> None:
        """Keep the vectors of ``rows`` (positions in the chunk); write a part when enough has waited."""
        data = np.asarray(vectors, dtype=np.float32).astype(self.dtype)
        new = [k for k, row in enumerate(rows) if row not in self.rows]
        if not new:
            return
        rows, data = [rows[k] for k in new], data[new]
        self.width = data.shape[1]
        for row, vector in zip(rows, data):
            self.rows[row] = vector
        self.pending.append((rows, data))
        self.n_pending += len(rows)
        if self.n_pending >= self.flush_texts or self.clock() - self.last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write what is pending as the next part (verified), if anything is."""
        self.last_flush = self.clock()
        if not self.pending:
            return
        rows = np.asarray([r for part, _ in self.pending for r in part], dtype=np.int64)
        data = np.concatenate([block for _, block in self.pending])
        number = 1 + max((int(p.name.rsplit(".part", 1)[1][:-4]) for p in self.paths), default=0)
        path = self.chunk_path.with_name(f"{self.chunk_path.stem}.part{number:04d}.npz")
        write_verified(path, lambda handle: np.savez(handle, rows=rows, vectors=data), binary=True)
        self.paths.append(path)
        self.pending, self.n_pending = [], 0

    def assemble(self, size: int) -> np.ndarray:
        missing = [r for r in range(size) if r not in self.rows]
        if missing:
            raise ValueError(f"chunk {self.chunk_path.name}: no vector for {len(missing)} of its texts (first: "
                             f"position {missing[0]})")
        return np.stack([self.rows[r] for r in range(size)]).astype(self.dtype, copy=False)

    def remove(self) -> None:
        """The chunk is written: its parts go."""
        for path in self.paths:
            remove_verified(path)
        self.paths, self.pending, self.n_pending = [], [], 0


def _load_part(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return np.asarray(archive["rows"]), np.asarray(archive["vectors"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DamagedFileError(path, f"is not a part of embeddings ({type(exc).__name__}: {exc})") from None


class _ChunkReporter:
    """``on_batch`` for one chunk: moves the bar by what the encoder reports, never past the chunk's size."""

    def __init__(self, bar: Any, size: int) -> None:
        self.bar, self.size, self.done = bar, size, 0

    def __call__(self, n: int) -> None:
        n = max(0, min(int(n), self.size - self.done))
        if n:
            self.done += n
            self.bar.update(n)

    def finish(self) -> None:
        self(self.size - self.done)


def accepts_on_batch(encoder: Encoder) -> bool:
    """Whether ``encoder.encode`` takes the ``on_batch`` reporter (by name: ``**kwargs`` alone does not count, it may
    be handed on to a library that rejects it).

    >>> class Plain:
    ...     def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False): ...
    >>> class Reporting(Plain):
    ...     def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False, on_batch=None): ...
    >>> accepts_on_batch(Plain()), accepts_on_batch(Reporting())
    (False, True)
    """
    return accepts_keyword(encoder, "on_batch")


def accepts_keyword(encoder: Encoder, name: str) -> bool:
    """Whether ``encoder.encode`` names the keyword ``name`` (``on_batch``, ``on_vectors``)."""
    return name in keyword_names(encoder.encode)


def _identity_of(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return file_identity(os.stat(path))
    except OSError:
        return None


def _load_chunk(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r", allow_pickle=False)
