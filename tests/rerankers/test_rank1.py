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


# --- the forced answer right after its own trace (CompletionRequests.fetch_chains) ---------------------------------

QUERY = "Is aspirin an NSAID?"
DOCS = ("Aspirin is an NSAID.", "Ibuprofen is sold over the counter.", "Unrelated text.")
PROMPTS = tuple(authors_prompt(QUERY, doc) for doc in DOCS)
# a's trace holds the answer; b's and c's are cut at max_tokens, so each is followed by its forced answer
FORCED_B = PROMPTS[1] + "\nThe passage is about ibuprofen.\n</think>"  # the trace cut at its last sentence
FORCED_C = PROMPTS[2] + "\nHmm\n</think>"
CHAIN_ANSWERS = {
    PROMPTS[0]: ("It is. ", "stop", {" true": -0.2, " false": -1.9}),
    PROMPTS[1]: ("The passage is about ibuprofen. It says noth", "length", {"ing": -0.1}),
    FORCED_B: ("", "length", {" false": -0.1, " true": -2.5}),
    PROMPTS[2]: ("Hmm", "length", {" true": -0.3}),
    FORCED_C: ("", "length", {" true": -0.05}),
}


def chain_scorer(server, cache_path=None, *, concurrency: int = 1):
    from r2med.llm.cache import ResponseCache
    from r2med.llm.client import ChatClient
    from r2med.rerankers.completions import CompletionRequests
    from r2med.rerankers.rank1 import TASK, Rank1Scorer

    client = ChatClient("rank1", server.base_url, max_retries=0, backoff=0.0)
    cache = ResponseCache(cache_path) if cache_path is not None else None
    return Rank1Scorer(CompletionRequests(client, task=TASK, cache=cache, concurrency=concurrency))


def without_timing(record):
    return None if record is None else {k: v for k, v in record.items() if k != "seconds"}


def test_fetch_chains_returns_what_fetching_traces_then_forced_answers_returns():
    """The records of the old path (every trace, then the forced answers of the unfinished ones) and of the chains
    are the same, and are the server's answers; a pair asked twice is sent once either way."""
    with CompletionsServer(CHAIN_ANSWERS) as server:
        old = chain_scorer(server, concurrency=2)
        traces = [old.trace_request(QUERY, doc) for doc in (*DOCS, DOCS[1])]
        records = old.requests.fetch(traces)
        unfinished = [i for i, record in enumerate(records) if old.follow_up(traces[i], record) is not None]
        assert unfinished == [1, 2, 3]
        forced = old.requests.fetch([old.forced_request(str(traces[i].prompt), records[i]["text"]) for i in unfinished])
        old_path = [(records[0], None), *((records[i], record) for i, record in zip(unfinished, forced))]
        assert len(server.bodies) == 5
        new = chain_scorer(server, concurrency=2)
        chains = new.requests.fetch_chains(traces, new.follow_up)
        assert len(server.bodies) == 10 and new.requests.requests_sent == 5 and new.requests.cached == 0
    assert [tuple(map(without_timing, chain)) for chain in chains] == [tuple(map(without_timing, c)) for c in old_path]
    # and they are the server's answers: text, how it ended, the last position's top logprobs
    expected = [(PROMPTS[0], None), (PROMPTS[1], FORCED_B), (PROMPTS[2], FORCED_C), (PROMPTS[1], FORCED_B)]
    for (trace, forced), (trace_prompt, forced_prompt) in zip(chains, expected):
        text, finish, top = CHAIN_ANSWERS[trace_prompt]
        assert (trace["text"], trace["finish_reason"], trace["last_top_logprobs"]) == (text, finish, top)
        if forced_prompt is None:
            assert forced is None
        else:
            text, finish, top = CHAIN_ANSWERS[forced_prompt]
            assert (forced["text"], forced["finish_reason"], forced["last_top_logprobs"]) == (text, finish, top)
            assert (forced["prompt_tokens"], forced["completion_tokens"]) == (10, 2)  # the fake server's usage


def test_each_forced_answer_goes_right_after_its_own_trace():
    """One slot: trace a, trace b, b's forced answer, trace c, c's forced answer (the old path sent the three
    traces first); with two slots each forced answer still follows its own trace, in that trace's slot."""
    with CompletionsServer(CHAIN_ANSWERS) as server:
        scorer = chain_scorer(server, concurrency=1)
        scores = scorer.score([QUERY] * 3, list(DOCS))
        assert [body["prompt"] for body in server.bodies] == [PROMPTS[0], PROMPTS[1], FORCED_B, PROMPTS[2], FORCED_C]
    expected_a = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.9))
    expected_b = math.exp(-2.5) / (math.exp(-2.5) + math.exp(-0.1))
    assert scores == pytest.approx([expected_a, expected_b, 0.5], abs=1e-12)
    assert (scorer.counts.from_trace, scorer.counts.forced, scorer.counts.fallback) == (1, 1, 1)


def test_cached_chains_send_nothing_and_a_cached_trace_sends_only_its_forced_answer(tmp_path):
    cache = tmp_path / "rank1.jsonl"
    with CompletionsServer(CHAIN_ANSWERS) as server:
        first = chain_scorer(server, cache, concurrency=2)
        scores = first.score([QUERY] * 3, list(DOCS))
        assert len(server.bodies) == 5 and len(cache.read_text().splitlines()) == 5
        again = chain_scorer(server, cache, concurrency=2)
        assert again.score([QUERY] * 3, list(DOCS)) == scores
        assert len(server.bodies) == 5  # every trace and forced answer from the cache
        assert (again.requests.requests_sent, again.requests.cached) == (0, 5)
        # the cache without b's forced answer (as if the run was killed between b's trace and it): only it is sent
        lines = [line for line in cache.read_text().splitlines()
                 if json.loads(line)["last_top_logprobs"] != CHAIN_ANSWERS[FORCED_B][2]]
        assert len(lines) == 4
        cache.write_text("".join(line + "\n" for line in lines))
        third = chain_scorer(server, cache, concurrency=2)
        assert third.score([QUERY] * 3, list(DOCS)) == scores
        assert [body["prompt"] for body in server.bodies[5:]] == [FORCED_B]
        assert (third.requests.requests_sent, third.requests.cached) == (1, 4)
        assert third.pair_tokens(QUERY, DOCS[1]) == (20, 4)  # b's trace and forced answer: 10 + 2 tokens each


def test_a_failure_midway_keeps_what_finished_and_the_rerun_sends_none_of_it(tmp_path):
    """One slot, c's trace unknown to the server (an error): a's trace, b's trace and b's forced answer were
    answered and stored; the rerun sends c's trace and forced answer only."""
    from r2med.errors import ProviderError

    cache = tmp_path / "rank1.jsonl"
    broken = {k: v for k, v in CHAIN_ANSWERS.items() if k != PROMPTS[2]}
    with CompletionsServer(broken) as server:
        with pytest.raises(ProviderError, match="unknown prompt"):
            chain_scorer(server, cache, concurrency=1).score([QUERY] * 3, list(DOCS))
        assert [body["prompt"] for body in server.bodies] == [PROMPTS[0], PROMPTS[1], FORCED_B, PROMPTS[2]]
        assert len(cache.read_text().splitlines()) == 3
        server.answers = CHAIN_ANSWERS
        rerun = chain_scorer(server, cache, concurrency=1)
        rerun.score([QUERY] * 3, list(DOCS))
        assert [body["prompt"] for body in server.bodies[4:]] == [PROMPTS[2], FORCED_C]
        assert (rerun.requests.requests_sent, rerun.requests.cached) == (2, 3)


def test_the_fallback_warning_comes_once_per_rerank_with_its_counts(caplog):
    """Four pairs in batches of one, two of them with the fallback 0.5 (c, d: their forced answers lack
    ' false'): one warning line for the rerank, not one per batch; a second rerank counts its own pairs."""
    from r2med.rerankers.pointwise import PointwiseReranker

    docs = {"a": DOCS[0], "b": DOCS[1], "c": DOCS[2], "d": "Also unrelated."}
    prompt_d = authors_prompt(QUERY, docs["d"])
    answers = {**CHAIN_ANSWERS, prompt_d: ("No", "length", {}),
               prompt_d + "\nNo\n</think>": ("", "length", {" yes": -1.0})}
    run = Run({"q": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}})
    with CompletionsServer(answers) as server:
        reranker = PointwiseReranker("rank1", chain_scorer(server, concurrency=2), batch_size=1, cache_dir=None,
                                     progress=False)
        with caplog.at_level("WARNING", logger="r2med.rerankers.rank1"):
            reranker.rerank({"q": QUERY}, docs, run, top_k=4)
            first = [r.getMessage() for r in caplog.records if r.name == "r2med.rerankers.rank1"]
            reranker.rerank({"q": QUERY}, docs, Run({"q": {"a": 2.0, "c": 1.0}}), top_k=2)
            second = [r.getMessage() for r in caplog.records if r.name == "r2med.rerankers.rank1"][len(first):]
        assert len(server.bodies) == 7 + 3  # a, b + forced, c + forced, d + forced; then a, c + forced again
    message = ("rank1: {} of {} pairs scored got the authors' fallback score 0.5 (no ' true'/' false' among the forced "
               "answer's top 20 logprobs)")
    assert first == [message.format(2, 4)]
    assert second == [message.format(1, 2)]
