"""Dense encoding moves its progress bar once per encoded batch, not once per cache chunk (issue 16, item 7).

The embedding cache writes chunks of ``chunk`` texts; an encoder whose ``encode`` takes ``on_batch`` reports each
batch inside a chunk, so with 25 texts, chunks of 10 and batches of 3 the bar moves 3, 3, 3, 1, 3, 3, 3, 1, 3, 2
(chunk 10 = 3+3+3+1, the last chunk of 5 = 3+2), where it used to move 10, 10, 5.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_encoder import FakeEncoder

from conftest import DATA
from progress_helpers import forbid_bars, record_bars
from r2med.retrievers.dense.cache import EmbeddingCache, accepts_on_batch

TEXTS = [f"document {i} " + "word " * (i % 7) for i in range(25)]


class BatchingEncoder(FakeEncoder):
    """The fake encoder with a batch loop that reports each batch, as r2med's own encoders do."""

    def __init__(self, report_scale: int = 1, **options) -> None:
        super().__init__(**options)
        self.report_scale = report_scale

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False, on_batch=None):
        size = batch_size or 4
        parts = []
        for start in range(0, len(texts), size):
            batch = list(texts[start:start + size])
            parts.append(super().encode(batch, kind=kind, instruction=instruction))
            if on_batch is not None:
                on_batch(len(batch) * self.report_scale)
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)


def test_the_bar_moves_per_batch_inside_each_chunk(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    cache = EmbeddingCache(tmp_path, chunk=10)
    stored = cache.embed(BatchingEncoder(), TEXTS, kind="document", batch_size=3, progress=True)
    assert stored.array().shape == (25, 16)
    [bar] = bars
    assert (bar.desc, bar.unit, bar.total, bar.leave) == ("encoding documents (fake)", "doc", 25, False)
    assert bar.updates == [3, 3, 3, 1, 3, 3, 3, 1, 3, 2] and bar.closed


def test_queries_count_in_queries_and_a_resumed_run_counts_only_what_is_left(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    cache = EmbeddingCache(tmp_path, chunk=10)
    with pytest.raises(KeyboardInterrupt):  # killed after the first chunk of 10
        cache.embed(BatchingEncoder(fail_after_calls=4), TEXTS, kind="query", batch_size=3, progress=True)
    cache.embed(BatchingEncoder(), TEXTS, kind="query", batch_size=3, progress=True)
    first, second = bars
    assert (first.desc, first.unit, first.total) == ("encoding queries (fake)", "query", 25)
    assert first.updates == [3, 3, 3, 1] and first.closed  # closed on the way out of the interruption
    assert second.total == 15 and second.updates == [3, 3, 3, 1, 3, 2]


def test_an_encoder_without_on_batch_moves_the_bar_per_chunk(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    encoder = FakeEncoder()
    assert not accepts_on_batch(encoder) and accepts_on_batch(BatchingEncoder())
    EmbeddingCache(tmp_path, chunk=10).embed(encoder, TEXTS, kind="document", batch_size=3, progress=True)
    assert bars[0].updates == [10, 10, 5]


def test_an_encoder_that_over_reports_never_moves_the_bar_past_its_chunk(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    EmbeddingCache(tmp_path, chunk=10).embed(BatchingEncoder(report_scale=2), TEXTS, kind="document", batch_size=3,
                                             progress=True)
    # reports of 6 per batch of 3: the first chunk fills at 6 + 4, the second likewise, the last at 5
    assert bars[0].updates == [6, 4, 6, 4, 5]


def test_progress_off_creates_no_bar_and_a_cached_run_none(monkeypatch, tmp_path):
    forbid_bars(monkeypatch)
    cache = EmbeddingCache(tmp_path, chunk=10)
    cache.embed(BatchingEncoder(), TEXTS, kind="document", batch_size=3, progress=False)
    bars = record_bars(monkeypatch)
    cache.embed(BatchingEncoder(), TEXTS, kind="document", batch_size=3, progress=True)  # all stored: nothing to show
    assert bars == []


def test_a_local_model_reports_each_batch(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    from r2med.retrievers.dense.factory import make_encoder

    bars = record_bars(monkeypatch)
    encoder = make_encoder(str(DATA / "dense" / "tiny-bert"), device="cpu")
    assert accepts_on_batch(encoder)
    stored = EmbeddingCache(tmp_path, chunk=5).embed(encoder, TEXTS[:7], kind="document", batch_size=2, progress=True)
    assert stored.n == 7 and bars[0].updates == [2, 2, 1, 2]


def test_an_embedding_api_reports_each_request(monkeypatch, tmp_path):
    from embedding_server import EmbeddingServer

    from r2med.retrievers.dense.api import OpenAIEmbeddings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    bars = record_bars(monkeypatch)
    with EmbeddingServer(dim=8, api_key="sk-test") as server:
        for concurrency in (1, 3):
            encoder = OpenAIEmbeddings("m", base_url=server.url, batch_size=3, max_concurrency=concurrency, timeout=5)
            assert accepts_on_batch(encoder)
            EmbeddingCache(tmp_path / str(concurrency), chunk=10).embed(encoder, TEXTS, kind="document", progress=True)
    for bar in bars:  # in whatever order the requests are answered, one update per request
        assert sorted(bar.updates) == sorted([3, 3, 3, 1, 3, 3, 3, 1, 3, 2]) and bar.total == 25


def test_an_encoder_called_with_progress_shows_its_own_bar(monkeypatch):
    pytest.importorskip("torch")
    from r2med.retrievers.dense.factory import make_encoder

    bars = record_bars(monkeypatch)
    reported = []
    make_encoder(str(DATA / "dense" / "tiny-bert"), device="cpu").encode(
        TEXTS[:5], kind="query", batch_size=2, progress=True, on_batch=reported.append)
    assert reported == [2, 2, 1]
    assert (bars[0].desc, bars[0].unit, bars[0].updates) == ("tiny-bert queries", "query", [2, 2, 1])


def test_a_python_model_reports_each_batch(monkeypatch, tmp_path):
    from r2med.retrievers.dense.python_encoder import PythonEncoder

    class Lengths:  # an r2med.Encoder: encode(texts, *, kind, instruction) and a cache key
        cache_key = "lengths-v1"

        def encode(self, texts, *, kind, instruction):
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    bars = record_bars(monkeypatch)
    encoder = PythonEncoder(Lengths(), batch_size=3)
    assert accepts_on_batch(encoder)
    EmbeddingCache(tmp_path, chunk=10).embed(encoder, TEXTS, kind="query", progress=True)
    assert (bars[0].desc, bars[0].unit) == ("encoding queries (python:lengths-v1)", "query")
    assert bars[0].updates == [3, 3, 3, 1, 3, 3, 3, 1, 3, 2]
