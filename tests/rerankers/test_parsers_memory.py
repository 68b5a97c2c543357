"""Issue 35, finding 7: the listwise and ReasonRank answer parsers work in memory bounded by the answer's size.

Before, a 40 MB listwise answer took 2.9 GB: the chain regexes kept ~75 bytes of backtracking state per character
(``read_permutation`` at d6d4c86 peaks at 84x the answer's size on a 200 KB ``[1] > [1] > ...`` chain, measured
with tracemalloc, which sees the regex engine's stack). The bound the issue sets is ~25x the answer; these tests
measure the Python heap's peak (tracemalloc) while each parser reads a 200 KB answer of each hostile shape, after a
warm-up call so that compiled patterns and tables are not counted. Memory, not time: nothing here is timed.
"""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from r2med.rerankers.listwise import RankGPTPrompt
from r2med.rerankers.permutation import read_permutation
from r2med.rerankers.reasonrank import ReasonRankPrompt, reasonrank_permutation

SIZE = 200_000
BOUND = 25  # the bound: at most ~25x the answer

PIECES = {
    "bracket-chain": "[1] > ",
    "superscript-ids": "[1]² ",
    "bare-chain": "1 > ",
    "long-ids": "[" + "7" * 50 + "] > ",
    "subscript-prose": "CO₂ [3] ",
    "digits": "7 ",
    "open-think": "<think>[2] > ",
}

PARSERS = {
    "read_permutation": lambda text: read_permutation(text, 20),
    "RankGPTPrompt.parse": lambda text: RankGPTPrompt().parse(text, None, 20),
    "reasonrank_permutation": lambda text: reasonrank_permutation(text, 20),
    "ReasonRankPrompt.parse": lambda text: ReasonRankPrompt(tokenizer_source="not-loaded").parse(text, None, 20),
}


def peak_bytes(parse, text: str) -> int:
    """The Python heap's peak above its level at the call, while ``parse(text)`` runs."""
    parse("[2] > [1] " + text[:1000])  # warm-up: patterns, digit tables, class set-up
    tracemalloc.start()
    try:
        parse(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize("shape", sorted(PIECES))
def test_a_huge_answer_is_parsed_in_memory_bounded_by_its_size(parser, shape):
    piece = PIECES[shape]
    text = piece * (SIZE // len(piece))
    peak = peak_bytes(PARSERS[parser], text)
    assert peak <= BOUND * sys.getsizeof(text), (parser, shape, peak / sys.getsizeof(text))


def test_the_measure_sees_the_regex_engines_memory():
    """The bound can fail: a backtracking regex over the same chain (the shape of the parser before) peaks far
    above it, so tracemalloc does see the engine's stack."""
    import re

    chain = re.compile(r"(?:\[\d+\]\s*>\s*)+")
    text = PIECES["bracket-chain"] * (SIZE // len(PIECES["bracket-chain"]))
    peak = peak_bytes(lambda t: chain.search(t), text)
    assert peak > BOUND * sys.getsizeof(text)
