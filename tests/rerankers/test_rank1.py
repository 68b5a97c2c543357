"""Rank1 as its authors ran it (orionw/rank1 rank1.py): the prompt byte for byte, the trace's stop strings and
sampling, the forced answer after an unfinished trace, and P(true) from the logprobs a (fake) server returns,
each expected value worked out here from the authors' rules."""

from __future__ import annotations

import json
import math

import pytest
from completions_server import CompletionsServer

from r2med.options import Runtime
from r2med.rerankers.rank1 import cut_trace, rank1_prompt
from r2med.rerankers.registry import make_reranker, resolve_reranker
from r2med.types import Run

HEAD = "Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\n"


def authors_prompt(query: str, passage: str) -> str:
    # rank1.py:243-247: the four string pieces, concatenated
    return HEAD + f"Query: {query}\n" + f"Passage: {passage}\n" + "<think>"


def test_the_prompt_is_the_authors_byte_for_byte():
    query, passage = "Does {x} cause \"fever\"?", "Line one.\nLine two with 'quotes' and {braces}."
    assert rank1_prompt(query, passage) == (
        "Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\n"
        "Query: Does {x} cause \"fever\"?\nPassage: Line one.\nLine two with 'quotes' and {braces}.\n<think>")
    assert rank1_prompt(query, passage) == authors_prompt(query, passage)
    # prompts.py's SciFact prompt, FILL_QUERY_HERE replaced by the query (rank1.py:242)
    scifact = "Claim: FILL_QUERY_HERE\n\nA relevant passage would provide evidence"
    assert rank1_prompt("0-dimensional biomaterials", "p", scifact) == authors_prompt(
        "Claim: 0-dimensional biomaterials\n\nA relevant passage would provide evidence", "p")


def test_the_trace_is_cut_at_its_last_sentence_before_the_answer_is_forced():
    assert cut_trace("The passage is about fever.  It also mentions asp") == "The passage is about fever."
    assert cut_trace("Is it? Maybe! Not sure.\n") == "Is it? Maybe! Not sure."
    assert cut_trace("   no end here   ") == "no end here"
    assert cut_trace("") == ""


def test_the_package_data_cites_the_authors_code():
    from r2med.rerankers.completions import prompt_data

    data = prompt_data()["rank1"]
    assert data["prompt"]["source"].startswith("orionw/rank1 rank1.py:241-247")
    assert data["stop"]["text"] == ["</think> true", "</think> false"] and data["stop"]["source"].endswith("rank1.py:90")


@pytest.mark.parametrize("style", ["openai", "llamacpp"])
def test_scores_from_the_servers_logprobs_with_the_forced_answer(tmp_path, style):
    query = "Is aspirin an NSAID?"
    docs = {"a": "Aspirin is an NSAID.", "b": "Ibuprofen is sold over the counter.", "c": "Unrelated text."}
    p = {d: authors_prompt(query, text) for d, text in docs.items()}
    trace_b = "The passage is about ibuprofen. It says noth"
    trace_c = "Hmm"
    forced_b = p["b"] + "\n" + "The passage is about ibuprofen." + "\n</think>"  # rank1.py:121-124
    forced_c = p["c"] + "\n" + "Hmm" + "\n</think>"
    answers = {
        # a: the trace reached "</think> true": its last position holds both tokens
        p["a"]: ("It is. ", "stop", {" true": -0.2, " false": -1.9, " maybe": -4.0}),
        # b: cut at max_tokens; the last position has neither -> forced answer
        p["b"]: (trace_b, "length", {"ing": -0.1, " more": -3.0}),
        forced_b: ("", "length", {" false": -0.1, " true": -2.5}),
        # c: the forced answer lacks " false" -> the authors' 0.5
        p["c"]: (trace_c, "length", {" true": -0.3}),
        forced_c: ("", "length", {" true": -0.05, " yes": -3.0}),
    }
    with CompletionsServer(answers, style=style) as server:
        reranker = make_reranker("rank1-7b", {"base_url": server.base_url, "llm_model": "rank1", "concurrency": 2},
                                 Runtime(cache_dir=tmp_path, progress=False))
        run = Run({"q": {"c": 3.0, "b": 2.0, "a": 1.0}})
        scorer = reranker.scorer
        scores = scorer.score([query] * 3, [docs["a"], docs["b"], docs["c"]])
        expected_a = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.9))
        expected_b = math.exp(-2.5) / (math.exp(-2.5) + math.exp(-0.1))
        assert scores == pytest.approx([expected_a, expected_b, 0.5], abs=1e-12)
        assert (scorer.counts.from_trace, scorer.counts.forced, scorer.counts.fallback) == (1, 1, 1)
        bodies = {b["prompt"]: b for b in server.bodies}
        assert set(bodies) == set(answers) and len(server.bodies) == 5
        first = bodies[p["a"]]
        assert (first["model"], first["temperature"], first["max_tokens"], first["logprobs"], first["stop"],
                first["skip_special_tokens"]) == ("rank1", 0.0, 8192, 20, ["</think> true", "</think> false"], False)
        forced = bodies[forced_b]
        assert (forced["temperature"], forced["max_tokens"], forced["logprobs"], "stop" in forced) == (0.0, 1, 20, False)
        assert "allowed_token_ids" not in forced

        # the reranker orders by P(true): a (0.845) > c (0.5) > b (0.142); a rerun scores nothing and sends nothing
        sent = len(server.bodies)
        reranked = reranker.rerank({"q": query}, docs, run, top_k=3)
        assert [d for d, _ in reranked.ranked("q")] == ["a", "c", "b"]
        assert len(server.bodies) == sent  # every response was in the response cache
        again = make_reranker("rank1-7b", {"base_url": server.base_url, "llm_model": "rank1"},
                              Runtime(cache_dir=tmp_path, progress=False)).rerank({"q": query}, docs, run, top_k=3)
        assert [d for d, _ in again.ranked("q")] == ["a", "c", "b"] and len(server.bodies) == sent


def test_answer_token_ids_go_to_the_forced_answer_as_allowed_token_ids(tmp_path):
    query, doc = "q", "d"
    prompt = authors_prompt(query, doc)
    forced = prompt + "\nNo end\n</think>"
    answers = {prompt: ("No end", "length", {}), forced: ("", "length", {" true": -1.0, " false": -1.0})}
    with CompletionsServer(answers) as server:
        reranker = make_reranker("rank1-7b", {"base_url": server.base_url, "answer_token_ids": [830, 895]},
                                 Runtime(cache_dir=None, progress=False))
        assert reranker.scorer.score([query], [doc]) == [0.5]  # equal logprobs: exactly one half, from the formula
        bodies = {b["prompt"]: b for b in server.bodies}
    assert bodies[forced]["allowed_token_ids"] == [830, 895] and "allowed_token_ids" not in bodies[prompt]
    assert bodies[prompt]["model"] == "jhu-clsp/rank1-7b"  # the served model defaults to the hub id
    assert reranker.scorer.counts.forced == 1


def test_rank1_needs_a_server_and_names_the_fix(monkeypatch):
    from r2med.errors import UsageError

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    from r2med.settings import get_settings

    if get_settings().openai_base_url:
        pytest.skip("OPENAI_BASE_URL is set in this environment")
    with pytest.raises(UsageError, match=r"pass --base-url .*vllm serve jhu-clsp/rank1-7b"):
        make_reranker("rank1-7b", {}, Runtime(progress=False))
    assert resolve_reranker("jhu-clsp/rank1-7b").folder == "rank1-7b"


def test_a_server_without_logprobs_is_an_error_not_a_silent_half(tmp_path):
    from r2med.errors import ProviderError
    from r2med.llm.client import ChatClient
    from r2med.rerankers.completions import CompletionRequests
    from r2med.rerankers.rank1 import Rank1Scorer

    prompt = authors_prompt("q", "d")
    with CompletionsServer({prompt: ("x", "stop", {})}) as server:
        server.answer = lambda text, finish, last, prompt="": {"choices": [{"text": text, "finish_reason": finish}]}  # type: ignore
        client = ChatClient("m", server.base_url, max_retries=0, backoff=0.0)
        scorer = Rank1Scorer(CompletionRequests(client, task="t"))
        with pytest.raises(ProviderError, match="no logprobs"):
            scorer.score(["q"], ["d"])
    json.dumps(scorer.describe())  # the score cache's key material is JSON


def test_a_pipeline_file_takes_their_options_and_checks_them():
    from pathlib import Path

    from r2med.config import parse_spec
    from r2med.errors import InvalidInputError
    from r2med.rerankers.options import Qwen3RerankerOptions, Rank1Options

    spec = parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "rank1-7b", "base_url": "http://x/v1",
                                                                      "max_tokens": 64, "answer_token_ids": [1, 2]}},
                      base=Path("."))
    assert spec.reranker.options == Rank1Options(base_url="http://x/v1", max_tokens=64, answer_token_ids=[1, 2])
    assert Rank1Options().max_tokens == 8192 and Rank1Options().temperature == 0.0
    spec = parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "qwen3-reranker-4b", "via_server": True}},
                      base=Path("."))
    assert spec.reranker.options == Qwen3RerankerOptions(via_server=True)
    with pytest.raises(InvalidInputError, match=r"\[reranker\]: unknown key\(s\) window"):
        parse_spec({"retriever": [{"name": "bm25"}], "reranker": {"name": "rank1-7b", "window": 5}}, base=Path("."))


def test_the_cost_line_counts_every_request_of_the_result(tmp_path):
    """Tokens per query over every pair's trace and forced answer, worked out from what the fake server says each
    answer used (prompt tokens: the prompt's characters; completion tokens: the text's characters + 1)."""
    from r2med.rerankers.base import cost_line

    query = "Is aspirin an NSAID?"
    docs = {"a": "Aspirin is an NSAID.", "b": "Ibuprofen is sold over the counter.", "c": "Unrelated text."}
    p = {d: authors_prompt(query, text) for d, text in docs.items()}
    forced_b = p["b"] + "\nThe passage is about ibuprofen.\n</think>"
    forced_c = p["c"] + "\nHmm\n</think>"
    answers = {p["a"]: ("It is. ", "stop", {" true": -0.2, " false": -1.9}),
               p["b"]: ("The passage is about ibuprofen. It says noth", "length", {"ing": -0.1}),
               forced_b: ("", "length", {" false": -0.1, " true": -2.5}),
               p["c"]: ("Hmm", "length", {" true": -0.3}),
               forced_c: ("", "length", {" true": -0.05})}
    used = {prompt: (len(prompt), len(text) + 1) for prompt, (text, _, _) in answers.items()}
    prompt_total = sum(n for n, _ in used.values())
    completion_total = sum(n for _, n in used.values())
    assert (prompt_total, completion_total) == (len(p["a"]) + len(p["b"]) + len(forced_b) + len(p["c"]) + len(forced_c),
                                                8 + 45 + 1 + 4 + 1)
    run = Run({"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 1.0}})
    queries = {"q1": query, "q2": query}  # q2's one pair is q1's pair (a): requested once, counted once

    def rerank() -> dict:
        reranker = make_reranker("rank1-7b", {"base_url": server.base_url, "llm_model": "rank1"},
                                 Runtime(cache_dir=tmp_path, progress=False))
        return reranker.rerank(queries, docs, run, top_k=3).details()

    with CompletionsServer(answers, usage=lambda prompt, text: (len(prompt), len(text) + 1)) as server:
        first = rerank()
        assert len(server.bodies) == 5
        again = rerank()  # every pair from the score cache, its tokens from the response cache
        assert len(server.bodies) == 5
        (tmp_path / "rerank" / "completions" / "rank1.jsonl").unlink()
        blind = rerank()  # the scores are cached, the responses are gone: their tokens are not known
        assert len(server.bodies) == 5
    per_query = f"{prompt_total / 2:,.0f} prompt + {completion_total / 2:,.0f} completion tokens"
    assert cost_line(first) == (f"cost per query: {per_query} (2 queries, 4 pairs, 0 from the cache; this run sent 5 "
                                f"requests, {prompt_total:,} + {completion_total:,} tokens)")
    assert first["result_prompt_tokens"] == first["prompt_tokens"] == prompt_total
    assert cost_line(again) == (f"cost per query: {per_query} (2 queries, 4 pairs, 3 from the cache; this run sent 0 "
                                "requests, 0 + 0 tokens)")
    assert cost_line(blind) == ("cost per query: 0 prompt + 0 completion tokens (2 queries, 4 pairs, 3 from the cache; "
                                "this run sent 0 requests, 0 + 0 tokens; the tokens of 3 pairs are not known)")
