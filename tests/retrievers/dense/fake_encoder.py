"""A deterministic encoder for tests: hashed bag of characters, normalised; counts what it encodes."""

from __future__ import annotations

import hashlib

import numpy as np


class FakeEncoder:
    name = "fake"

    def __init__(self, dim: int = 16, fail_after_calls: int | None = None) -> None:
        self.dim = dim
        self.calls = 0
        self.texts_encoded = 0
        self.fail_after_calls = fail_after_calls

    def vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False):
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt("killed mid-corpus")
        self.calls += 1
        self.texts_encoded += len(texts)
        return np.stack([self.vector(f"{kind}|{instruction}{t}") for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def cache_key(self, kind):
        return {"model": "fake", "dim": self.dim}
