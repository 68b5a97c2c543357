"""Property tests (hypothesis): every parser of the LLM rerankers' output is total (any text in, the documented
result out, never an exception), and the linear-time rewrites find what the regexes they replace find.

References kept here: r2med's listwise parser as it was (the chain regexes; ~75 bytes of backtracking state per
character of a long chain), and the authors' ReasonRank reader (``8421BCD/ReasonRank`` ``rerank/rankllm.py:456-527``,
typed from the source: the answer pattern, ``isdigit``, ``int(x) - 1`` with the ``ValueError`` fallback).
"""

from __future__ import annotations

import math
import re
import unicodedata

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from r2med.llm.requests import read_top_logprobs  # noqa: E402
from r2med.rerankers.completions import two_way  # noqa: E402
from r2med.rerankers.listwise import RankGPTPrompt  # noqa: E402
from r2med.rerankers.permutation import SAMPLE, SHOWN_DIGITS, isdigit_runs, read_permutation  # noqa: E402
from r2med.rerankers.qwen3 import qwen3_server_score  # noqa: E402
from r2med.rerankers.rank1 import cut_trace, forced_prompt, rank1_score  # noqa: E402
from r2med.rerankers.reasonrank import ANSWER_PATTERN, ReasonRankPrompt, answer_span, authors, reasonrank_permutation  # noqa: E402

SOME = settings(max_examples=300, deadline=None)
FEW = settings(max_examples=12, deadline=None)

#: any string: every Unicode category, lone surrogates included (json.loads makes them from "\\ud800")
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=200)
ATOMS = ["[", "]", " ", "  ", "\n", "\t", "\u3000", ">", " > ", ",", "->", "→", ".", "-", "passage", "x", "A",
         "<think>", "</think>", "<THINK>", "</Think>", "<answer>", "</answer>", "<ANSWER>", "</answer >",
         "1", "2", "3", "07", "12", "0", "٣", "١٢", "²", "₂", "①", "⁰", "12²", "[1]", "[2]", "[3]", "[ 2 ]", "[٣]",
         "[1]²", "CO₂", "m³", "7" * 700, "7" * 4300, "7" * 4301, "0" * 4299 + "2", "0" * 4301 + "1", "٠" * 700 + "3"]
ATOM_TEXT = st.lists(st.sampled_from(ATOMS), max_size=30).map("".join)
TEXT = st.one_of(ATOM_TEXT, ANY_TEXT)
N = st.integers(0, 25)
#: a huge answer, built cheaply: one piece repeated up to ~5 MB
HUGE = st.tuples(st.sampled_from(["[1] > ", "[1]² ", "1 > ", "1 ", "7", "[", "<think>", "</think>", "<answer>",
                                  "<think>x</think> <answer>1", "\u00b2", "٣", "[" + "7" * 50 + "] > "]),
                 st.integers(1, 5_000_000)).map(lambda t: t[0] * max(1, t[1] // len(t[0])))

# ------------------------------------------------------------------ references


def _significant(digits: str) -> str:
    i = next((k for k, c in enumerate(digits) if unicodedata.decimal(c) != 0), len(digits))
    return digits[i:]


def reference_listwise(text: str) -> tuple[list[str], str]:
    """r2med's listwise reader before issue 35 (the digit strings, not int()ed: a 5,000-digit one raised)."""
    bracket = re.compile(r"\[\s*(\d+)\s*\]")
    bracket_chain = re.compile(r"\[\s*\d+\s*\](?:\s*(?:>|,|->|→)\s*\[\s*\d+\s*\])+")
    bare_chain = re.compile(r"(?<![\d.])\d+(?:\s*(?:>|->|→)\s*\d+)+(?![\d.])")
    number = re.compile(r"\d+")
    close = text.rfind("</think>")
    if text.rfind("<think>") > close:
        return [], "unfinished-trace"
    answer = text[close + len("</think>"):] if close >= 0 else text

    def longest(pattern):
        best, best_len = None, 0
        for match in pattern.finditer(answer):
            length = len(number.findall(match.group(0)))
            if length >= best_len:
                best, best_len = match.group(0), length
        return best

    chain = longest(bracket_chain)
    if chain is not None:
        return bracket.findall(chain), "bracket-chain"
    if bracket.findall(answer):
        return bracket.findall(answer), "brackets"
    chain = longest(bare_chain)
    if chain is not None:
        return number.findall(chain), "chain"
    numbers = number.findall(answer)
    return (numbers, "numbers") if numbers else ([], "none")


def reference_repair(ids: list[int | None], n: int) -> tuple[int, ...]:
    order: list[int] = []
    for ident in ids:
        if ident is not None and 1 <= ident <= n and ident - 1 not in order:
            order.append(ident - 1)
    return tuple(order + [i for i in range(n) if i not in order])


def authors_reasonrank(response: str, n: int) -> tuple[int, ...]:
    """rankllm.py:456-527 (_clean_response, receive_permutation) on one window of n passages."""
    match = re.search(ANSWER_PATTERN, response.lower(), re.DOTALL)
    if match:
        response = match.group(1).strip()
    elif "<answer>" in response:
        response = response.split("<answer>")[-1]
    new_response = "".join(c if c.isdigit() else " " for c in response).strip()
    try:
        ids = [int(x) - 1 for x in new_response.split()]
    except ValueError:
        return tuple(range(n))
    return reference_repair([i + 1 for i in ids], n)


# ------------------------------------------------------------------ listwise (RankGPT)


@SOME
@given(TEXT, N)
def test_listwise_reads_what_the_regex_reader_read(text, n):
    digits, source = reference_listwise(text)
    report = read_permutation(text, n)
    values = [int(s or "0") if len(s := _significant(d)) <= SHOWN_DIGITS else None for d in digits]
    assert report.source == source
    assert report.read_count == len(digits)
    assert report.read == tuple(v for v in values if v is not None)[:SAMPLE]
    assert report.order == reference_repair(values, n)


@SOME
@given(TEXT, N, st.one_of(st.none(), ANY_TEXT))
def test_listwise_is_total(text, n, reasoning):
    report = read_permutation(text, n)
    assert sorted(report.order) == list(range(n))
    assert len(report.read) <= SAMPLE and report.read_count >= len(report.read)
    parsed, trace, answer = RankGPTPrompt().parse(text, reasoning, n)
    assert sorted(parsed.order) == list(range(n)) and isinstance(trace, str) and isinstance(answer, str)


@FEW
@given(HUGE)
def test_listwise_on_huge_answers(text):
    report = read_permutation(text, 20)
    assert sorted(report.order) == list(range(20)) and len(report.duplicates) <= SAMPLE


# ------------------------------------------------------------------ ReasonRank


def test_the_linear_answer_finder_implements_the_authors_pattern():
    assert authors()["answer_pattern"] == ANSWER_PATTERN


@SOME
@given(TEXT)
def test_answer_span_is_what_the_authors_regex_finds(text):
    string, start, end, source = answer_span(text)
    match = re.search(ANSWER_PATTERN, text.lower(), re.DOTALL)
    if match:
        assert (source, string[start:end]) == ("answer-tags", match.group(1))
    elif "<answer>" in text:
        assert (source, string[start:end]) == ("after-answer-tag", text.split("<answer>")[-1])
    else:
        assert (source, string[start:end]) == ("whole-text", text)


@SOME
@given(TEXT, N)
def test_reasonrank_orders_as_the_authors_code(text, n):
    report = reasonrank_permutation(text, n)
    assert report.order == authors_reasonrank(text, n)
    cleaned = "".join(c if c.isdigit() else " " for c in text)
    assert [m.group() for m in isdigit_runs(text)] == cleaned.split()


@SOME
@given(TEXT, N, st.one_of(st.none(), ANY_TEXT))
def test_reasonrank_is_total(text, n, reasoning):
    report = reasonrank_permutation(text, n)
    assert sorted(report.order) == list(range(n))
    parsed, trace, answer = ReasonRankPrompt(tokenizer_source="not-loaded").parse(text, reasoning, n)
    assert sorted(parsed.order) == list(range(n)) and isinstance(trace, str) and isinstance(answer, str)


@FEW
@given(HUGE)
def test_reasonrank_on_huge_answers(text):
    assert sorted(reasonrank_permutation(text, 20).order) == list(range(20))


# ------------------------------------------------------------------ Rank1, Qwen3-Reranker

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10 ** 400), 10 ** 400),
                    st.booleans(), st.none(), st.text(max_size=5))
JSON = st.recursive(st.one_of(NUMBERS, ANY_TEXT), lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["top_logprobs", "content", "token", "logprob",
                                                                   " true", " false", "yes", "no"]) | ANY_TEXT,
                                                  inner, max_size=4)), max_leaves=20)
TOP = st.one_of(st.dictionaries(st.sampled_from([" true", " false", "yes", "no", "x"]), NUMBERS), JSON)


@SOME
@given(TOP)
def test_rank1_and_qwen3_scores_are_total(top):
    score = rank1_score(top)
    assert score is None or (isinstance(score, float) and 0.0 <= score <= 1.0)
    value = qwen3_server_score(top)
    assert isinstance(value, float) and 0.0 <= value <= 1.0
    pair = two_way(top, " true", " false", missing=-10.0)
    assert isinstance(pair, float) and 0.0 <= pair <= 1.0


@SOME
@given(JSON)
def test_read_top_logprobs_is_total(logprobs):
    tops = read_top_logprobs(logprobs)
    assert tops is None or all(isinstance(k, str) and math.isfinite(v) for row in tops for k, v in row.items())


def test_read_top_logprobs_leaves_out_numbers_beyond_float():
    assert read_top_logprobs({"top_logprobs": [{" true": 10 ** 400, " false": -1}]}) == ({" false": -1.0},)
    assert rank1_score({" true": 10 ** 400, " false": -1.0}) is None
    assert qwen3_server_score({"yes": "-0.1", "no": float("nan")}) == 0.5  # both count as -10


@SOME
@given(TEXT, TEXT)
def test_rank1_trace_cutting_is_total(prompt, trace):
    assert isinstance(cut_trace(trace), str) and isinstance(forced_prompt(prompt, trace), str)
