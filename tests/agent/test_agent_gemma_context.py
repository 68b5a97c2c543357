"""The context budget against llama.cpp (``xllamacpp``, Gemma-3 270M, see ``test_agent_gemma.py``): a small context
shared by several slots. llama.cpp gives each request one slot, ``n_ctx / n_parallel`` tokens (here 2048 / 4 =
512), answers a prompt that fills it with HTTP 400 (``exceed_context_size_error``) and cuts a completion at its
end. r2med learns the per-slot figure from ``/props``, counts each prompt with the server's ``/tokenize`` (BOS
included), clamps ``max_tokens`` and ends a query whose documents overflow the slot ``context-full``, its output
kept: no query fails with 400."""

from __future__ import annotations

import pytest

from llm_helpers import gemma_server, write_scifact_subset
from r2med.agent.context import context_window
from r2med.agent.loop import AgentConfig, run_agent
from r2med.agent.search import open_searcher
from r2med.datasets import load_dir
from r2med.retrievers.bm25.retriever import BM25Retriever

pytestmark = pytest.mark.slow

N_CTX, SLOTS = 2048, 4
PER_SLOT = N_CTX // SLOTS  # 512
N_QUERIES = 4
DOC_CHARS = 1200  # three documents of ~250 Gemma tokens each: one search's information passes the slot
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    yield from gemma_server(tmp_path_factory, n_ctx=N_CTX, n_parallel=SLOTS)


def test_documents_past_a_llama_cpp_slot_end_context_full(gemma_url, tmp_path):
    window = context_window(gemma_url + "/v1", "gemma-3-270m")
    assert window is not None and window.length == PER_SLOT
    assert window.source.endswith(f"{PER_SLOT} tokens per slot, {SLOTS} slots")

    data, qids = write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=20, doc_chars=DOC_CHARS)
    dataset = load_dir(data, "scifact")
    searcher = open_searcher(BM25Retriever(progress=False), dataset)
    config = AgentConfig(protocol="search-r1-infer", llm_model="gemma-3-270m", base_url=gemma_url + "/v1",
                         chat_template="gemma", max_tokens=MAX_TOKENS, temperature=0.0, seed=7, max_turns=3,
                         concurrency=SLOTS, max_retries=1)
    report = run_agent(dataset, config, searcher, out_dir=tmp_path / "out", progress=False)
    assert report.failures == {} and report.stopped is None  # no 400, no other failure
    rows = report.trajectories
    assert [r["id"] for r in rows] == qids and all(r["error"] is None for r in rows)
    full = [r for r in rows if r["stop_reason"] == "context-full"]
    assert full, [r["stop_reason"] for r in rows]
    for row in full:
        details = row["context_full"]
        assert details["request"] == "turn" and details["context_length"] == PER_SLOT
        assert details["prompt_tokens"] >= PER_SLOT
        assert row["turns"] and row["turns"][0]["text"] in row["output"]  # kept
        assert row["output"].count("<information>") == len(row["turns"])  # each turn searched, then it overflowed
    for row in rows:  # every request fitted its slot: prompt + completion within 512 tokens
        for turn in row["turns"]:
            assert turn["prompt_tokens"] + turn.get("max_tokens", MAX_TOKENS) <= PER_SLOT
    assert report.stop_reasons.get("context-full") == len(full) and report.written == N_QUERIES
