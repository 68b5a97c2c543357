"""Embedding cache under R2MED_HOME, keyed by content, written in chunks, resumable, memory-mapped.

``<root>/<key>/`` holds ``manifest.json`` (what the key was made of, the number of texts, the
chunk size, and the checksum of its own content) and ``chunk_00000.npy``, ``chunk_00001.npy``, ...
each written atomically as soon as it is encoded, followed by its checksum ``chunk_00000.npy.sha256``.
A run killed mid-corpus leaves its finished chunks; the next run encodes only the missing ones.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

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

    def __init__(self, root: Path, *, chunk: int = DEFAULT_CHUNK, dtype: str = "float32") -> None:
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        self.root = Path(root)
        self.chunk = chunk
        self.dtype = dtype
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
        total = sum(min(chunk, len(texts) - i * chunk) for i in missing)
        per_batch = accepts_on_batch(encoder)
        with progress_bar(total, desc=f"encoding {kind_label(kind)} ({encoder.name})", unit=kind_unit(kind),
                          enabled=progress) as bar:
            for i in missing:
                part = list(texts[i * chunk : (i + 1) * chunk])
                report = _ChunkReporter(bar, len(part))
                extra = {"on_batch": report} if per_batch else {}
                vectors = np.asarray(
                    encoder.encode(part, kind=kind, instruction=instruction, batch_size=batch_size, progress=False, **extra),
                    dtype=np.float32,
                )
                if vectors.shape[0] != len(part):
                    raise ValueError(f"encoder {encoder.name} returned {vectors.shape[0]} vectors for {len(part)} texts")
                data = vectors.astype(self.dtype)
                write_verified(stored.chunk_path(i), lambda handle, data=data: np.save(handle, data, allow_pickle=False), binary=True)
                self.encoded_texts += len(part)
                report.finish()  # an encoder without on_batch, or one that reported less: the rest of the chunk now
        return stored


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
    return "on_batch" in keyword_names(encoder.encode)


def _identity_of(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return file_identity(os.stat(path))
    except OSError:
        return None


def _load_chunk(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r", allow_pickle=False)
