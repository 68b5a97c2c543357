"""A test encoder that works like ``BaseEncoder``: batches of ``batch`` texts, each handed to ``on_vectors`` and
``on_batch`` as it is finished; counts the texts it is given; can advance a fake clock per batch, and stop (raise
KeyboardInterrupt, or SIGKILL its own process) when a given batch starts. Also run as a script (the SIGKILL test):

    python streaming_encoder.py CACHE_DIR N_TEXTS KILL_AT_BATCH FLUSH_TEXTS FLUSH_SECONDS SECONDS_PER_BATCH [CHUNKS_PER_CALL]

``chunks_per_call`` (as a multi-device encoder has it) makes the cache hand it several chunks per call.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_encoder import FakeEncoder  # noqa: E402


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class StreamingEncoder(FakeEncoder):
    def __init__(self, *, batch: int = 50, clock: FakeClock | None = None, seconds_per_batch: float = 0.0,
                 stop_at_batch: int | None = None, kill: bool = False, chunks_per_call: int = 1) -> None:
        super().__init__()
        self.batch, self.clock, self.seconds_per_batch = batch, clock, seconds_per_batch
        self.stop_at_batch, self.kill, self.batches = stop_at_batch, kill, 0
        self.chunks_per_call, self.calls = chunks_per_call, 0

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False, on_batch=None, on_vectors=None):
        texts = list(texts)
        self.texts_encoded += len(texts)
        self.calls += 1
        out = np.zeros((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), self.batch):
            self.batches += 1
            if self.batches == self.stop_at_batch:
                if self.kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise KeyboardInterrupt
            rows = list(range(start, min(start + self.batch, len(texts))))
            vectors = np.stack([self.vector(f"{kind}|{instruction}{texts[i]}") for i in rows])
            out[rows] = vectors
            if self.clock is not None:
                self.clock.now += self.seconds_per_batch
            if on_vectors is not None:
                on_vectors(rows, vectors)
            if on_batch is not None:
                on_batch(len(rows))
        return out


def texts(n: int) -> list[str]:
    return [f"text number {i} " + "word " * (i % 13) for i in range(n)]


if __name__ == "__main__":
    from r2med.retrievers.dense.cache import EmbeddingCache

    root, n, kill_at, flush_texts, flush_seconds, per_batch = sys.argv[1:7]
    group = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    clock = FakeClock()
    encoder = StreamingEncoder(clock=clock, seconds_per_batch=float(per_batch), stop_at_batch=int(kill_at), kill=True,
                               chunks_per_call=group)
    cache = EmbeddingCache(Path(root), flush_texts=int(flush_texts), flush_seconds=float(flush_seconds), clock=clock)
    cache.embed(encoder, texts(int(n)), kind="document")
    sys.exit(3)  # never reached: the encoder kills the process first
