"""Reranking shows one bar: pairs for a pointwise reranker (moved per scored batch), windows for a listwise LLM
(moved per answered window); none with progress off, and none for pairs or windows the cache already holds."""

from __future__ import annotations

import pytest

from progress_helpers import forbid_bars, record_bars
from r2med.rerankers.pointwise import PointwiseReranker
from r2med.types import Run

QUERIES = {"q1": "blood sugar", "q2": "fever"}
CORPUS = {f"d{i}": f"document {i} " + "text " * i for i in range(5)}
RUN = Run({qid: {f"d{i}": 5.0 - i for i in range(5)} for qid in QUERIES}, name="first")


class LengthScorer:
    """Scores a pair by the document's length (a PairScorer)."""

    def describe(self) -> dict:
        return {"kind": "length"}

    def score(self, queries, documents):
        return [float(len(d)) for d in documents]


def test_pointwise_moves_per_batch_of_pairs(monkeypatch, tmp_path):
    bars = record_bars(monkeypatch)
    reranker = PointwiseReranker("len", LengthScorer(), batch_size=4, cache_dir=tmp_path)
    out = reranker.rerank(QUERIES, CORPUS, RUN, top_k=5)
    assert [d for d, _ in out.ranked("q1")] == ["d4", "d3", "d2", "d1", "d0"]
    [bar] = bars  # 10 pairs: the two queries share documents but not queries, so all 10 are distinct
    assert (bar.desc, bar.unit, bar.total, bar.updates, bar.closed) == ("reranking (len)", "pair", 10, [4, 4, 2], True)
    PointwiseReranker("len", LengthScorer(), batch_size=4, cache_dir=tmp_path).rerank(QUERIES, CORPUS, RUN, top_k=5)
    assert len(bars) == 1  # every score cached: no bar


def test_pointwise_progress_off_creates_no_bar(monkeypatch):
    forbid_bars(monkeypatch)
    PointwiseReranker("len", LengthScorer(), batch_size=4, progress=False).rerank(QUERIES, CORPUS, RUN, top_k=5)


@pytest.mark.parametrize("progress", [True, False])
def test_listwise_moves_per_window_and_the_chat_client_shows_no_second_bar(monkeypatch, progress):
    from listwise_server import ListwiseServer

    from r2med.llm.client import ChatClient
    from r2med.rerankers.listwise import ListwiseReranker

    if progress:
        bars = record_bars(monkeypatch)
    else:
        forbid_bars(monkeypatch)
    with ListwiseServer(lambda query, n, messages: " > ".join(f"[{i}]" for i in range(n, 0, -1))) as server:
        client = ChatClient("test-llm", server.base_url, max_retries=1, backoff=0.01)
        reranker = ListwiseReranker(client, name="listwise-test", window=3, stride=2, concurrency=2, progress=progress)
        reranker.rerank(QUERIES, CORPUS, RUN, top_k=5)
        assert len(server.requests) == 4  # windows 3-5 and 1-3 of each query
    if progress:
        [bar] = bars
        assert (bar.desc, bar.unit, bar.total, bar.updates) == ("reranking (listwise-test)", "window", 4, [1, 1, 1, 1])
