"""Rank1 and Qwen3-Reranker scores read from a real server's logprobs: llama.cpp (``xllamacpp``) serving Gemma-3 270M
on loopback, three SciFact queries (top 4, 16-token traces). The numbers are poor (Gemma is neither model); the
point is that each score is the authors' rule applied to the logprobs the server returned. The runs on the bundled
50-query sample, killed and resumed, are ``test_sample_gemma.py``."""

from __future__ import annotations

import json
import math

import pytest

from llm_helpers import gemma_server, write_scifact_subset
from r2med.options import Runtime
from r2med.rerankers.registry import make_reranker
from r2med.types import Run

pytestmark = pytest.mark.slow

N_QUERIES, TOP_K = 3, 4



@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    yield from gemma_server(tmp_path_factory, n_ctx=4096, n_parallel=2)


@pytest.fixture
def sample(tmp_path):
    """N_QUERIES SciFact queries, their judged documents and others (cut to 300 characters), and a first stage:
    each query's judged documents first, then others."""
    data, qids = write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=TOP_K, doc_chars=300)
    rows = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines()]
    qrels = [json.loads(line) for line in (data / "qrels.jsonl").read_text().splitlines()]
    others = [str(r["id"]) for r in rows[-TOP_K:]]
    run = Run()
    for qid in qids:
        judged = [str(r["p_id"]) for r in qrels if str(r["q_id"]) == qid]
        docs = list(dict.fromkeys(judged + others))[:TOP_K]
        run[qid] = {doc: float(TOP_K - i) for i, doc in enumerate(docs)}
    from r2med.store.runs import write_trec_run

    path = write_trec_run(run, tmp_path / "first.run")
    queries = {str(json.loads(line)["id"]): json.loads(line)["text"] for line in (data / "query.jsonl").read_text().splitlines()}
    corpus = {str(r["id"]): r["text"] for r in rows}
    return data, path, run, queries, corpus


def test_both_rerankers_score_from_a_real_servers_logprobs(gemma_url, sample, tmp_path):
    _, _, run, queries, corpus = sample
    rank1 = make_reranker("rank1-7b", {"base_url": gemma_url + "/v1", "llm_model": "gemma", "max_tokens": 16, "concurrency": 2},
                          Runtime(cache_dir=tmp_path / "home", progress=False))
    reranked = rank1.rerank(queries, corpus, run, top_k=TOP_K)
    counts = rank1.scorer.counts
    assert counts.from_trace + counts.forced + counts.fallback == N_QUERIES * TOP_K
    assert counts.forced + counts.fallback >= 1  # a 16-token trace of Gemma does not end in "</think> true"
    assert sorted(reranked) == sorted(run) and all(len(reranked[q]) == TOP_K for q in run)
    qwen = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": gemma_url + "/v1", "llm_model": "gemma",
                                                 "concurrency": 2}, Runtime(cache_dir=tmp_path / "home", progress=False))
    scores = qwen.scorer.score([queries[q] for q in run for _ in range(1)], [corpus[next(iter(run[q]))] for q in run])
    assert rank1.scorer.requests.requests_sent >= N_QUERIES * TOP_K and qwen.scorer.requests.requests_sent == N_QUERIES
    # each score is the card's rule applied to the top logprobs llama.cpp returned (stored in the response cache)
    records = [json.loads(line) for line in (tmp_path / "home" / "rerank" / "completions" / "gemma.jsonl").read_text()
               .splitlines()]
    one_token = [r for r in records if r["completion_tokens"] == 1 and r["stop"] is None and r["positions"] == 1]
    tops = [r["last_top_logprobs"] for r in records]
    assert all(len(top) == 20 for top in tops)  # the server honoured logprobs: 20
    expected = []
    for top in one_token[-N_QUERIES:]:
        yes, no = top["last_top_logprobs"].get("yes", -10.0), top["last_top_logprobs"].get("no", -10.0)
        expected.append(math.exp(yes) / (math.exp(yes) + math.exp(no)))
    assert sorted(scores) == pytest.approx(sorted(expected), abs=1e-12)
