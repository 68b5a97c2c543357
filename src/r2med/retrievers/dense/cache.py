"""Embedding cache under R2MED_HOME, keyed by content, written in chunks, resumable, memory-mapped.

``<root>/<key>/`` holds ``manifest.json`` (what the key was made of, the number of texts, the
chunk size) and ``chunk_00000.npy``, ``chunk_00001.npy``, ... each written atomically as soon as
it is encoded. A run killed mid-corpus leaves its finished chunks; the next run encodes only the
missing ones. The key hashes the encoder's ``cache_key`` (model id, revision, pooling, max length,
dtype, ...), the kind, the instruction text, the storage dtype, every text, and the format version:
never a name alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from r2med.io.atomic import write_atomic, write_text_atomic
from r2med.retrievers.dense.base import Encoder, Kind

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

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(offset, memory-mapped block)`` in text order."""
        for i in range(self.n_chunks):
            yield i * self.chunk, np.load(self.chunk_path(i), mmap_mode="r", allow_pickle=False)

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
        manifest = folder / "manifest.json"
        chunk = self.chunk
        if manifest.is_file():
            chunk = int(json.loads(manifest.read_text(encoding="utf-8"))["chunk"])
        else:
            write_text_atomic(manifest, json.dumps({**material, "chunk": chunk}, indent=1, sort_keys=True))
        stored = StoredEmbeddings(folder, len(texts), chunk)
        missing = [i for i in range(stored.n_chunks) if not stored.chunk_path(i).is_file()]
        if not missing:
            logger.info("%s embeddings of %d texts found in the cache (%s)", kind, len(texts), folder)
            return stored
        if len(missing) < stored.n_chunks:
            logger.info("resuming: %d of %d chunks of %s embeddings are already stored", stored.n_chunks - len(missing), stored.n_chunks, kind)
        bar = _bar(sum(min(chunk, len(texts) - i * chunk) for i in missing), f"encoding {kind.replace('query', 'querie')}s", progress)
        try:
            for i in missing:
                part = list(texts[i * chunk : (i + 1) * chunk])
                vectors = np.asarray(
                    encoder.encode(part, kind=kind, instruction=instruction, batch_size=batch_size, progress=False),
                    dtype=np.float32,
                )
                if vectors.shape[0] != len(part):
                    raise ValueError(f"encoder {encoder.name} returned {vectors.shape[0]} vectors for {len(part)} texts")
                data = vectors.astype(self.dtype)
                write_atomic(stored.chunk_path(i), lambda handle, data=data: np.save(handle, data, allow_pickle=False), binary=True)
                self.encoded_texts += len(part)
                bar.update(len(part))
        finally:
            bar.close()
        return stored


def _bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="text", disable=not enabled, leave=False)
