"""Issue 35, findings 5 and 7: answers that hold numbers Python's ``int()`` refuses, and huge answers.

End to end through ``r2med rerank`` against the scripted servers: a hostile answer gives the authors' fallback on the
first run AND on the rerun from the response cache (no request sent), exit 0 both times. The answer is cached before
it is parsed, so a parser that raised made every rerun crash again from the cache.

ReasonRank's rule (``8421BCD/ReasonRank`` ``rerank/rankllm.py:468-474`` and ``:512-516``): every character that
``str.isdigit`` refuses becomes a space; ``[int(x) - 1 for x in response.split()]``; a ``ValueError`` keeps the
window's order. ``int()`` refuses ``₂`` and ``²`` (``isdigit`` but not decimal) and more than 4,300 digits.
"""

from __future__ import annotations

import json

import pytest
from listwise_server import ListwiseServer
from reasonrank_server import ReasonRankServer
from rerank_helpers import BM25_TOP20, QUERIES, bm25_top20, ranked_ids, run_rerank_command, scifact

from conftest import shared_path
from r2med.rerankers.permutation import SAMPLE, read_permutation
from r2med.rerankers.reasonrank import reasonrank_permutation

FIVE_THOUSAND = "7" * 5000


def _order(path, qid):
    return [line.split()[2] for line in path.read_text().splitlines() if line.split()[0] == qid]


def test_reasonrank_keeps_the_window_order_on_unparsable_numbers_first_run_and_from_the_cache(tmp_path, isolated_home,
                                                                                               pytest_tokenizer_dir,
                                                                                               caplog):
    dataset = scifact()
    q3, q36, q212, q261 = (dataset.queries[q] for q in QUERIES)
    answers = {
        q3: "<think>Passage [3] discusses CO₂ levels; [5] is",  # a trace cut off: the whole text is read
        q36: "<think>ok</think>\n<answer>[2] > [1]²</answer>",  # "²" is a run of its own: int("²") raises
        q212: f"<think>ok</think> <answer>[{FIVE_THOUSAND}] > [2]</answer>",  # 5,000 digits: over int()'s limit
        q261: "<think>ok</think> <answer>[2] > [1]</answer>",  # a clean answer: 2, 1, then 3..20
    }
    argv = ["rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "reasonrank-7b", "--tokenizer",
            pytest_tokenizer_dir, "--top-k", "20", "--tasks", "scifact", "--data-dir", shared_path("data", "scifact")]
    run = bm25_top20()
    expected = {qid: ranked_ids(run, qid) for qid in ("3", "36", "212")}
    first261 = ranked_ids(run, "261")
    expected["261"] = [first261[1], first261[0], *first261[2:]]
    with ReasonRankServer(lambda query, n, body: answers[query]) as server:
        first = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "a")
        assert first.code == 0, first.err
        assert len(server.requests) == 4
        again = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "b")
        assert again.code == 0, again.err
        assert len(server.requests) == 4  # the rerun is answered from the cache
    assert "4 windows, 4 from the cache; this run sent 0 requests" in again.err
    for out in ("a", "b"):
        where = tmp_path / out / "reranker" / "reasonrank-7b" / "bm25" / "top_20"
        assert {qid: _order(where / "scifact.run", qid) for qid in QUERIES} == expected
        log = {e["qid"]: e for e in map(json.loads, (where / "scifact.windows.jsonl").read_text().splitlines())}
        assert {qid: (log[qid]["source"], log[qid].get("unreadable")) for qid in QUERIES} == {
            "3": ("unparsable", "₂"), "36": ("unparsable", "²"),
            "212": ("unparsable", "77777777777777777777... (5000 characters)"), "261": ("answer-tags", None)}
    warning = ("reasonrank-7b: 3 of 4 window answers hold a number Python's int() refuses (first: '₂', query 3, "
               "window 1-20); those windows keep their order, as the authors' code does")
    assert caplog.messages.count(warning) == 2  # the first run and the rerun


@pytest.fixture
def pytest_tokenizer_dir(tmp_path):
    from test_reasonrank import byte_tokenizer

    pytest.importorskip("ftfy", reason="ftfy (the llm extra) is needed for ReasonRank's prompt")
    path = tmp_path / "tokenizer"
    byte_tokenizer().save_pretrained(path)
    return path


def test_listwise_reads_huge_and_foreign_numbers_first_run_and_from_the_cache(tmp_path, isolated_home):
    """RankGPT's parser reads ``\\d`` (decimal digits of any script): a 5,000-digit identifier is out of range (it
    raised ValueError before), ``[٣]`` is 3, ``²`` is no digit."""
    dataset = scifact()
    q3, q36, q212, q261 = (dataset.queries[q] for q in QUERIES)
    answers = {
        q3: f"[{FIVE_THOUSAND}] > [2] > [1]",  # 2, 1, then 3..20
        q36: f"{FIVE_THOUSAND} > 3 > 1",  # a bare chain: 3, 1, then 2, 4..20
        q212: "[٣] > [1]²",  # 3, 1, then 2, 4..20
        q261: "[" * 1000 + "2] > [1]",  # 2, 1
    }
    argv = ["rerank", "--run", BM25_TOP20, "--system", "bm25", "--reranker", "listwise", "--llm-model", "test/llm",
            "--top-k", "20", "--tasks", "scifact", "--data-dir", shared_path("data", "scifact")]
    run = bm25_top20()

    def moved(qid, firsts):
        head = ranked_ids(run, qid)
        return [head[i - 1] for i in firsts] + [d for i, d in enumerate(head, 1) if i not in firsts]

    expected = {"3": moved("3", [2, 1]), "36": moved("36", [3, 1]), "212": moved("212", [3, 1]),
                "261": moved("261", [2, 1])}
    with ListwiseServer(lambda query, n, messages: answers[query]) as server:
        first = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "a")
        assert first.code == 0, first.err
        again = run_rerank_command(*argv, "--base-url", server.base_url, "--output", tmp_path / "b")
        assert again.code == 0, again.err
        assert len(server.requests) == 4
    for out in ("a", "b"):
        where = tmp_path / out / "reranker" / "listwise-test__llm" / "bm25" / "top_20"
        assert {qid: _order(where / "scifact.run", qid) for qid in QUERIES} == expected
        log = {e["qid"]: e for e in map(json.loads, (where / "scifact.windows.jsonl").read_text().splitlines())}
        # a number of more than 640 digits is counted, not listed
        assert (log["3"]["source"], log["3"]["out_of_range"], log["3"]["out_of_range_count"]) == ("bracket-chain", [], 1)
        assert log["36"]["source"] == "chain" and log["212"]["source"] == "bracket-chain"


@pytest.mark.parametrize(("text", "n", "order", "source", "unreadable"), [
    # rankllm.py:512-516: one run int() refuses keeps the whole window's order, wherever it is
    ("Passage [3] discusses CO₂ levels; [5] is", 5, (0, 1, 2, 3, 4), "unparsable", "₂"),
    ("<think>x</think><answer>[1]²</answer>", 3, (0, 1, 2), "unparsable", "²"),
    ("[2] > [12²]", 13, tuple(range(13)), "unparsable", "12²"),  # one run: int("12²") raises
    ("<think>x</think><answer>[2] > [1] (m³)</answer>", 3, (0, 1, 2), "unparsable", "³"),
    ("[3] > ① > [1]", 3, (0, 1, 2), "unparsable", "①"),
    (f"[{FIVE_THOUSAND}] > [2]", 3, (0, 1, 2), "unparsable", "77777777777777777777... (5000 characters)"),
    ("[" + "0" * 4301 + "1]", 3, (0, 1, 2), "unparsable", "00000000000000000000... (4302 characters)"),  # zeros count
    # what int() takes, the authors take: 4,300 digits (out of range here), any script's decimals, leading zeros
    ("[" + "0" * 4299 + "2] > [1]", 3, (1, 0, 2), "whole-text", ""),
    ("[٣] > [1]", 3, (2, 0, 1), "whole-text", ""),
    ("[" + "9" * 4300 + "] > [2]", 3, (1, 0, 2), "whole-text", ""),
    # a refused run outside the answer tags does not count: only the answer is read
    ("<think>CO₂</think> <answer>[2] > [1]</answer>", 2, (1, 0), "answer-tags", ""),
])
def test_reasonrank_unparsable_numbers(text, n, order, source, unreadable):
    report = reasonrank_permutation(text, n)
    assert (report.order, report.source, report.unreadable) == (order, source, unreadable)


def test_reasonrank_matches_int_on_every_run_length_limit():
    """The deterministic rule equals what int() does under Python's default limit (4,300 digits)."""
    import sys

    if not hasattr(sys, "get_int_max_str_digits") or sys.get_int_max_str_digits() != 4300:
        pytest.skip("this Python has no int_max_str_digits of 4300")
    for digits in ("1" * 4300, "1" * 4301, "0" * 4300 + "1", "٣" * 4300, "٣" * 4301):
        try:
            int(digits)
            refused = False
        except ValueError:
            refused = True
        assert (reasonrank_permutation(digits, 2).source == "unparsable") is refused, len(digits)


def test_a_huge_listwise_answer_reports_bounded_samples_and_true_counts():
    # 100,000 repeats of [1] and [9]: the report lists SAMPLE of each, counts all
    report = read_permutation("[1] > [9] > " * 100_000 + "[2]", 3)
    assert report.order == (0, 1, 2) and report.source == "bracket-chain"
    assert (report.read_count, report.duplicate_count, report.out_of_range_count) == (200_001, 99_999, 100_000)
    assert report.read == (1, 9) * (SAMPLE // 2)
    assert report.duplicates == (1,) * SAMPLE and report.out_of_range == (9,) * SAMPLE
    assert report.missing == (3,) and not report.clean
