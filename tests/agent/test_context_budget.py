"""The context budget (``r2med.agent.context``): against a vLLM-like server that enforces ``max_model_len`` (HTTP 400
past it, as vLLM does) a query never fails with 400: ``max_tokens`` is clamped to the room the prompt leaves
(prompt tokens counted by the server's ``/tokenize``, its beginning-of-sequence token included), and a query whose
documents overflow the context ends ``context-full`` with its output kept and counted. The scripted server
(``completion_server.py``) tokenizes one token per character plus one BOS token, so every figure is worked out from
the prompts it received."""

from __future__ import annotations

import dataclasses
import json

import pytest
from completion_server import CompletionServer

from conftest import shared_path
from r2med.agent.context import ContextWindow, context_window
from r2med.agent.loop import AgentConfig, run_agent
from r2med.agent.search import open_searcher
from r2med.agent.tokens import ByteBound
from r2med.datasets import load_dir
from r2med.retrievers.bm25.retriever import BM25Retriever

Q1 = "0-dimensional biomaterials show inductive properties."  # two searches, then an answer
R1_MAX_TOKENS, O1_MAX_TOKENS = 1024, 8192


@pytest.fixture(scope="module")
def scifact():
    return load_dir(shared_path("data", "scifact"), "scifact")


@pytest.fixture(scope="module")
def searcher(scifact):
    return open_searcher(BM25Retriever(progress=False), scifact)


def run(scifact, searcher, out, server, style="search-r1", **kwargs):
    dataset = dataclasses.replace(scifact, queries={"q": Q1}, qrels={})
    protocol = "search-r1-infer" if style == "search-r1" else "search-o1"
    config = AgentConfig(protocol=protocol, llm_model="test-model", base_url=server.base_url, chat_template="chatml",
                         concurrency=1, max_retries=0, **kwargs)
    report = run_agent(dataset, config, searcher, out_dir=out, progress=False)
    return report, report.trajectories[0], json.loads((out / "summary.json").read_text())


def test_vllm_context_is_learned_and_a_query_past_it_ends_context_full(scifact, searcher, tmp_path):
    with CompletionServer() as free:  # no limit: the prompts the scripted model gets
        run(scifact, searcher, tmp_path / "free", free)
    first, second = (len(body["prompt"]) + 1 for body in free.requests[:2])  # + BOS
    assert len(free.requests) == 3  # search, search, answer
    limit = second + 300  # the second turn fits with 300 new tokens; the third prompt (+ ~4,500 characters) does not
    with CompletionServer(max_model_len=limit) as server:
        assert context_window(server.base_url, "test-model") == ContextWindow(
            limit, f"vLLM's /v1/models max_model_len ({server.base_url.removesuffix('/v1')})")
        report, row, summary = run(scifact, searcher, tmp_path / "vllm", server)
    assert server.refused == [] and report.failures == {}  # no HTTP 400
    assert [body["max_tokens"] for body in server.requests] == [min(R1_MAX_TOKENS, limit - first), 300]
    assert [t.get("max_tokens") for t in row["turns"]] == [None, 300]  # the turn shows a clamped max_tokens
    # the third prompt is the whole text so far: it leaves no room, so it is never sent
    assert row["stop_reason"] == "context-full" and row["context_full"] == {
        "request": "turn", "prompt_tokens": len(row["prompt"] + row["output"]) + 1, "context_length": limit}
    assert len(row["prompt"] + row["output"]) + 1 >= limit
    # its output is kept: both turns and both searches' information
    assert row["output"].count("<information>") == 2 and len(row["searches"]) == 2
    assert row["output"].startswith(free.requests[1]["prompt"][len(row["prompt"]):])
    assert report.stop_reasons == {"context-full": 1} and report.written == 1
    assert summary["report"]["stop_reasons"] == {"context-full": 1}
    assert summary["context"]["length"] == limit and summary["context"]["counted_by"].startswith("the server's /tokenize")


def test_search_o1_reason_in_documents_past_the_context_ends_context_full(scifact, searcher, tmp_path):
    limit = 8000  # Search-o1's prompt (~3,200 characters) fits; ten SciFact documents to condense (~15,000) do not
    with CompletionServer(max_model_len=limit) as server:
        report, row, _ = run(scifact, searcher, tmp_path, server, style="search-o1")
    assert server.refused == [] and len(server.requests) == 1
    prompt = server.requests[0]["prompt"]
    assert server.requests[0]["max_tokens"] == limit - (len(prompt) + 1) < O1_MAX_TOKENS
    full = row["context_full"]
    assert row["stop_reason"] == "context-full" and full["request"] == "reason-in-documents"
    assert full["prompt_tokens"] > limit and full["context_length"] == limit
    assert row["output"] == row["turns"][0]["text"] and "<|end_search_query|>" in row["output"]  # kept
    assert report.failures == {}


def test_a_server_that_hides_its_context_refuses_and_the_query_ends_context_full(scifact, searcher, tmp_path):
    with CompletionServer() as free:
        run(scifact, searcher, tmp_path / "free", free)
    second = len(free.requests[1]["prompt"]) + 1
    limit = second + 300
    with CompletionServer(max_model_len=limit, tell_context=False) as server:
        report, row, summary = run(scifact, searcher, tmp_path / "hidden", server)
    # no budget is known: the second request (max_tokens 1024) is refused with vLLM's 400, once (not retried)
    assert server.refused == [second + R1_MAX_TOKENS] and len(server.requests) == 2
    assert row["stop_reason"] == "context-full" and "maximum context length is" in row["context_full"]["error"]
    assert row["output"].count("<information>") == 1 and report.failures == {} and summary["context"] is None


def test_context_length_given_and_no_tokenizer_counts_a_bound(scifact, searcher, tmp_path):
    limit = 1500
    with CompletionServer(tokenize=False) as server:  # no /tokenize, no /v1/models
        report, row, summary = run(scifact, searcher, tmp_path, server, context_length=limit)
    sent = [body["prompt"] for body in server.requests]
    # bytes + 16 bounds the tokens (here one per character + BOS): max_tokens clamped to what the bound leaves
    assert [b["max_tokens"] for b in server.requests] == [min(R1_MAX_TOKENS, limit - len(p.encode()) - 16) for p in sent]
    assert server.requests[0]["max_tokens"] < R1_MAX_TOKENS and len(sent) == 1
    assert row["stop_reason"] == "context-full" and row["context_full"]["prompt_tokens"] == len(
        (row["prompt"] + row["output"]).encode()) + 16
    assert summary["context"] == {"length": limit, "source": "--context-length", "counted_by": ByteBound.source}
    assert report.failures == {}


def test_search_r1_eval_cuts_first_then_the_budget_clamps(scifact, searcher, tmp_path):
    """The protocol's cut to the last 4,096 tokens comes first (``test_search_r1_eval``: prompts of 3034, 3623, 4096
    and 4096 characters for this question); a server of 4,400 tokens then leaves 4400 - 4097 (BOS) = 303 tokens
    to the turns past the cut, 500 to the others."""
    question = "REPEAT vitamin B12 " + "homocysteine levels in elderly patients " * 60
    dataset = dataclasses.replace(scifact, queries={"q": question}, qrels={})
    with CompletionServer(max_model_len=4400) as server:
        config = AgentConfig(style="search-r1", llm_model="test-model", base_url=server.base_url,
                             chat_template="chatml", concurrency=1)
        report = run_agent(dataset, config, searcher, out_dir=tmp_path, progress=False)
    assert [len(b["prompt"]) for b in server.requests] == [3034, 3623, 4096, 4096]
    assert [b["max_tokens"] for b in server.requests] == [500, 500, 303, 303] and server.refused == []
    row = report.trajectories[0]
    assert row["stop_reason"] == "answer" and row["answer"] == "The evidence on"
