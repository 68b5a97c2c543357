"""Listwise reranking of SciFact's BM25 top 20 against a local OpenAI-compatible server that returns fixed
permutations and garbage: the final order is exactly what the returned permutations imply (worked out by hand)."""

from __future__ import annotations

import json

import pytest
from listwise_server import ListwiseServer, Reply
from rerank_helpers import BM25_TOP20, QUERIES, bm25_top20, ranked_ids, run_rerank_command, scifact

from conftest import shared_path
from r2med.errors import ProviderError
from r2med.llm.cache import ResponseCache
from r2med.llm.client import ChatClient
from r2med.rerankers.listwise import ListwiseReranker
from r2med.rerankers.prompts import cut_words


def reverse(n: int) -> str:
    return " > ".join(f"[{i}]" for i in range(n, 0, -1))


def by_query(answers: dict):
    """An answer function for the server: ``answers[qid](n)`` for the window of query ``qid``."""
    dataset = scifact()
    qid_of = {dataset.queries[qid]: qid for qid in QUERIES}
    return lambda query, n, messages: answers[qid_of[query]](n)


def reranker(server: ListwiseServer, **options) -> ListwiseReranker:
    client = ChatClient("test-llm", server.base_url, max_retries=options.pop("max_retries", 2), backoff=0.01)
    return ListwiseReranker(client, progress=False, **options)


def test_one_window_per_query_with_clean_garbage_and_reasoning_answers(tmp_path):
    dataset, run = scifact(), bm25_top20()
    answers = {
        "3": lambda n: reverse(n),  # clean: [20] > [19] > ... > [1]
        # repeats, an identifier out of range and prose: reads 3, 1, 2; then 4..20 in their order
        "36": lambda n: "Sure! Ranking: [3] > [3] > [25] > [1] > [2]. I hope this helps.",
        # an inline trace names [1] > [2]; only the answer after </think> counts: 18, 5, 1, then the rest
        "212": lambda n: "<think>Passage [1] looks best, so [1] > [2]</think>\n\n[18] > [5] > [1]",
        # the trace comes separately (reasoning_content): 4, 5, then 1, 2, 3, 6..20
        "261": lambda n: Reply("[4] > [5]", reasoning="thinking about [1] > [2]"),
    }
    rest = lambda *named: [i for i in range(20) if i not in named]
    expected_indices = {
        "3": list(range(19, -1, -1)),
        "36": [2, 0, 1, *rest(2, 0, 1)],
        "212": [17, 4, 0, *rest(17, 4, 0)],
        "261": [3, 4, *rest(3, 4)],
    }
    cache = ResponseCache(tmp_path / "responses.jsonl")
    with ListwiseServer(by_query(answers)) as server:
        ranker = reranker(server, cache=cache)
        out = ranker.rerank(dataset.queries, dataset.corpus, run, top_k=20)
        assert len(server.requests) == 4  # top 20 with window 20: one window per query
    for qid in QUERIES:
        bm25 = ranked_ids(run, qid)
        assert ranked_ids(out, qid) == [bm25[i] for i in expected_indices[qid]], qid
    # the window the server saw for query 3: BM25's top 20 in order, each cut to 300 words
    seen = next(r for r in server.requests if r.query == dataset.queries["3"])
    assert seen.passages == [f"[{i + 1}] {cut_words(dataset.corpus[d], 300)}" for i, d in enumerate(ranked_ids(run, "3"))]
    # query 212's relevant document was at BM25 rank 18; answer [18] first puts it at rank 1
    assert ranked_ids(out, "212")[0] in dataset.qrels["212"]
    log = {entry["qid"]: entry for entry in out.artifacts["windows"]}  # the window log comes with the result
    assert (log["3"]["source"], log["3"]["clean"]) == ("bracket-chain", True)
    assert (log["36"]["duplicates"], log["36"]["out_of_range"], log["36"]["missing"][:2]) == ([3], [25], [4, 5])
    assert log["212"]["reasoning"] == "Passage [1] looks best, so [1] > [2]" and log["212"]["answer"] == "[18] > [5] > [1]"
    assert log["261"]["reasoning"] == "thinking about [1] > [2]"
    # every response is in the cache with its trace
    records = [cache.get(key) for key in cache.keys()]  # noqa: SIM118 - ResponseCache is not a dict
    assert sorted(r["qid"] for r in records) == sorted(QUERIES)
    assert next(r for r in records if r["qid"] == "261")["reasoning"] == "thinking about [1] > [2]"
    # only query 3 named all 20 passages once: the answers of 36, 212 and 261 were repaired
    assert (out.stats.requested, out.stats.repaired) == (4, 3)


def test_sliding_windows_follow_the_previous_order():
    """Window 10, stride 5 over 20: windows (10, 20), (5, 15), (0, 10), each answered "reverse".
    Start 0..19 (BM25 indices). (10, 20) reversed: 0..9, 19..10.
    (5, 15) holds 5 6 7 8 9 19 18 17 16 15 -> reversed: 0 1 2 3 4 15 16 17 18 19 9 8 7 6 5 14 13 12 11 10.
    (0, 10) holds 0 1 2 3 4 15 16 17 18 19 -> reversed: 19 18 17 16 15 4 3 2 1 0 | 9 8 7 6 5 14 13 12 11 10."""
    dataset, run = scifact(), bm25_top20()
    final = [19, 18, 17, 16, 15, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 14, 13, 12, 11, 10]
    with ListwiseServer(lambda query, n, messages: reverse(n)) as server:
        out = reranker(server, window=10, stride=5).rerank(dataset.queries, dataset.corpus, run, top_k=20)
    assert len(server.requests) == 4 * 3
    for qid in QUERIES:
        bm25 = ranked_ids(run, qid)
        assert ranked_ids(out, qid) == [bm25[i] for i in final], qid
        shown = [r for r in server.requests if r.query == dataset.queries[qid]]
        second = [p.split("] ", 1)[1] for p in shown[1].passages]  # the window (5, 15) as the server saw it
        assert second == [cut_words(dataset.corpus[bm25[i]], 300) for i in (5, 6, 7, 8, 9, 19, 18, 17, 16, 15)]


def test_an_interrupted_run_resumes_from_the_cache(tmp_path):
    dataset, run = scifact(), bm25_top20()
    calls = {"36": 0}

    def flaky(query, n, messages):
        if query == dataset.queries["36"]:
            calls["36"] += 1
            if calls["36"] == 2:  # query 36's second window fails once
                return 500
        return reverse(n)

    path = tmp_path / "responses.jsonl"
    with ListwiseServer(flaky) as server:
        first = reranker(server, window=10, stride=5, cache=ResponseCache(path), max_retries=0)
        with pytest.raises(ProviderError, match=r"1 of 4 queries could not be reranked \(first: query 36"):
            first.rerank(dataset.queries, dataset.corpus, run, top_k=20)
        # the other queries finished all 3 windows; query 36 its first: 10 responses kept
        assert len(ResponseCache(path)) == 3 * 3 + 1
        server.requests.clear()
        second = reranker(server, window=10, stride=5, cache=ResponseCache(path))
        out = second.rerank(dataset.queries, dataset.corpus, run, top_k=20)
        assert [r.query for r in server.requests] == [dataset.queries["36"]] * 2  # only the two missing windows
        server.requests.clear()
        third = reranker(server, window=10, stride=5, cache=ResponseCache(path))
        again = third.rerank(dataset.queries, dataset.corpus, run, top_k=20)
        assert again == out
        assert server.requests == [] and again.stats.cached == 12
    final = [19, 18, 17, 16, 15, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 14, 13, 12, 11, 10]  # as in the sliding test
    assert ranked_ids(out, "36") == [ranked_ids(run, "36")[i] for i in final]


def test_on_error_keep_leaves_the_failed_window_in_place():
    dataset, run = scifact(), bm25_top20()
    with ListwiseServer(lambda query, n, messages: 503 if query == dataset.queries["3"] else reverse(n)) as server:
        out = reranker(server, on_error="keep", max_retries=0).rerank(dataset.queries, dataset.corpus, run, top_k=20)
    assert ranked_ids(out, "3") == ranked_ids(run, "3")
    assert ranked_ids(out, "36") == ranked_ids(run, "36")[::-1]


def test_queries_run_side_by_side_up_to_the_concurrency():
    dataset, run = scifact(), bm25_top20()
    with ListwiseServer(lambda query, n, messages: reverse(n), latency=0.3) as server:
        reranker(server, concurrency=2).rerank(dataset.queries, dataset.corpus, run, top_k=20)
    assert server.max_in_flight == 2  # 4 queries, one window each, at most 2 at a time


def test_first_stage_scores_in_the_prompt():
    dataset, run = scifact(), bm25_top20()
    with ListwiseServer(lambda query, n, messages: reverse(n)) as server:
        reranker(server, with_scores=True, window=20).rerank(dataset.queries, dataset.corpus, run, top_k=2)
    first = next(r for r in server.requests if r.query == dataset.queries["3"])
    # BM25's top 2 for query 3 scored 22.021790 and 16.974525 (4 significant digits in the prompt)
    top2 = [s for _, s in run.ranked("3")[:2]]
    assert [p.split(")")[0] for p in first.passages] == [f"[{i + 1}] (first-stage score: {s:.4g}" for i, s in enumerate(top2)]
    assert "first-stage retriever" in first.messages[-1]["content"]


def test_rerank_command_with_a_listwise_llm(tmp_path, isolated_home):
    with ListwiseServer(lambda query, n, messages: reverse(n)) as server:
        result = run_rerank_command(
            "rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "listwise", "--llm-model", "test/llm",
            "--base-url", server.base_url, "--top-k", "20", "--window", "10", "--stride", "5", "--tasks", "scifact",
            "--data-dir", shared_path("data", "scifact"), "--output", tmp_path, "--json",
        )
    assert result.code == 0, result.err
    where = tmp_path / "reranker" / "listwise-test__llm" / "bm25" / "top_20"
    windows = [json.loads(line) for line in (where / "scifact.windows.jsonl").read_text().splitlines()]
    assert len(windows) == 12 and all(w["clean"] for w in windows)
    assert (isolated_home / "rerank" / "listwise" / "test__llm.jsonl").is_file()
    assert json.loads(result.out)["scifact"]["ndcg_at_10"] == json.loads((where / "scifact.json").read_text())["test"]["ndcg_at_10"]


def test_a_single_passage_needs_no_request():
    dataset, run = scifact(), bm25_top20()
    with ListwiseServer(lambda query, n, messages: reverse(n)) as server:
        out = reranker(server).rerank(dataset.queries, dataset.corpus, run, top_k=1)
    assert server.requests == []
    assert all(ranked_ids(out, qid) == ranked_ids(run, qid) for qid in QUERIES)


def test_the_repaired_answers_warning_names_the_window_log_file(tmp_path, isolated_home, monkeypatch, caplog):
    """Issue 38, finding 7: "see the window log" says which file, as the output folder was given (relative here)."""
    monkeypatch.chdir(tmp_path)
    with ListwiseServer(lambda query, n, messages: "[1] > [1]") as server, caplog.at_level("WARNING", logger="r2med"):
        result = run_rerank_command(
            "rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "listwise", "--llm-model", "test/llm",
            "--base-url", server.base_url, "--top-k", "5", "--window", "5", "--stride", "5", "--tasks", "scifact",
            "--data-dir", shared_path("data", "scifact"), "--output", "res", "--json",
        )
    assert result.code == 0, result.err
    log = "res/reranker/listwise-test__llm/bm25/top_5/scifact.windows.jsonl"
    assert len((tmp_path / log).read_text().splitlines()) == 4  # one window per query, each answer repaired
    warned = [r.getMessage() for r in caplog.records if "window log" in r.getMessage()]
    assert warned == ["listwise-test__llm: 4 of 4 window answers were not a clean permutation (repeats, unknown or "
                      f"missing identifiers, no answer); see the window log {log}"]
