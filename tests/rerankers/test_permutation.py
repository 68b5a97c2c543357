"""parse_permutation / read_permutation: every kind of answer a listwise LLM gives, with the worked-out result.

Identifiers in answers are 1-based ([1] is the window's first passage); the results are 0-based orders.
"""

from __future__ import annotations

import random

import pytest

from r2med.rerankers.permutation import answer_part, parse_permutation, read_permutation


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        # clean answers
        ("[3] > [1] > [2]", 3, [2, 0, 1]),
        ("[3]>[1]>[2]", 3, [2, 0, 1]),
        ("[ 2 ] > [ 1 ]", 2, [1, 0]),
        ("[01] > [02]", 2, [0, 1]),  # leading zeros are the same identifiers
        ("[2] -> [1] -> [3]", 3, [1, 0, 2]),
        ("[2] → [3] → [1]", 3, [1, 2, 0]),
        ("[2], [3], [1]", 3, [1, 2, 0]),
        # prose around the ranking
        ("Here is the ranking: [2] > [3] > [1]. Hope this helps!", 3, [1, 2, 0]),
        # repeats: the second [2] is dropped; [3] never named, so it comes last
        ("[2] > [2] > [1]", 3, [1, 0, 2]),
        # missing: only [3] named; 1, 2, 4 follow in their previous order
        ("[3]", 4, [2, 0, 1, 3]),
        # out of range: [5] and [0] are not passages of a 3-passage window
        ("[5] > [0] > [1]", 3, [0, 1, 2]),
        ("[99999999999999999999] > [2]", 2, [1, 0]),
        # nothing usable: the window keeps its order
        ("", 3, [0, 1, 2]),
        ("I cannot rank these passages.", 3, [0, 1, 2]),
        ("[] > []", 2, [0, 1]),
        ("anything", 0, []),
        # reasoning traces: only the text after the last </think> counts
        ("<think>[1] > [2] > [3] seems wrong</think>[3] > [2] > [1]", 3, [2, 1, 0]),
        ("Let me compare [1] and [3]...\n</think>\n\n[2] > [1]", 3, [1, 0, 2]),  # template-opened trace
        ("<think>a</think> draft [1] > [2] <think>b</think> [2] > [1]", 2, [1, 0]),
        # a trace that never closed is no answer, even if it names identifiers
        ("<think>[3] > [2] > [1] is my guess", 3, [0, 1, 2]),
        # drafts: the longest chain wins; of equally long ones the last
        ("Maybe [1] > [2]. Final: [2] > [3] > [1]", 3, [1, 2, 0]),
        ("[1] > [2], or rather [2] > [1]", 2, [1, 0]),
        # a chain beats stray bracketed citations
        ("[2] > [1] (see also [3])", 3, [1, 0, 2]),
        # bracketed identifiers without a chain, in order of mention
        ("Passage [2] is best, then passage [1].", 3, [1, 0, 2]),
        # bare numbers: a '>' chain beats other numbers in the text
        ("2 > 3 > 1", 3, [1, 2, 0]),
        ("Of the 3 passages: 2 > 1 > 3", 3, [1, 0, 2]),
        # bare numbers without a chain: JSON lists and comma lists, read in order
        ("[3, 1, 2]", 3, [2, 0, 1]),
        ('```json\n{"ranking": [2, 1]}\n```', 2, [1, 0]),
        ("ranking: 3, 1, 2", 3, [2, 0, 1]),
        ("Passage 2 > Passage 1", 2, [1, 0]),
    ],
)
def test_parse_permutation(text, n, expected):
    assert parse_permutation(text, n) == expected


def test_report_names_every_repair():
    # read: 2, 9, 2, 0, 1; 9 and 0 are out of range; the second 2 is a repeat; 3 and 4 were never named
    report = read_permutation("Sure! [2] > [9] > [2] > [0] > [1]", 4)
    assert report.order == (1, 0, 2, 3)
    assert report.read == (2, 9, 2, 0, 1)
    assert report.out_of_range == (9, 0)
    assert report.duplicates == (2,)
    assert report.missing == (3, 4)
    assert report.source == "bracket-chain"
    assert not report.clean
    clean = read_permutation("[2] > [1]", 2)
    assert clean.clean and clean.missing == () and clean.source == "bracket-chain"


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ("[2] > [1]", "bracket-chain"),
        ("[2] then [1]", "brackets"),
        ("2 > 1", "chain"),
        ("2, 1", "numbers"),
        ("no idea", "none"),
        ("<think>[2] > [1]", "unfinished-trace"),
    ],
)
def test_report_source(text, source):
    assert read_permutation(text, 2).source == source


def test_answer_part():
    assert answer_part("plain [1]") == "plain [1]"
    assert answer_part("<think>x</think>y") == "y"
    assert answer_part("x</think>y</think>z") == "z"
    assert answer_part("<think>x") is None
    assert answer_part("<think>x</think>y<think>z") is None


def test_negative_n_is_an_error():
    with pytest.raises(ValueError):
        parse_permutation("[1]", -1)


def test_always_a_permutation_whatever_the_text():
    """Property: for any text (random mixes of identifiers, separators, tags and prose) and any n, the result is a
    permutation of range(n), and identifiers named first (in range, first mention) lead it."""
    rng = random.Random(20240601)
    atoms = ["[", "]", ">", " > ", ",", "->", "→", "<think>", "</think>", " ", "\n", "passage", "rank", ".", "-",
             *[str(i) for i in range(25)], *[f"[{i}]" for i in range(25)]]
    for _ in range(3000):
        n = rng.randint(0, 22)
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 40)))
        report = read_permutation(text, n)
        assert sorted(report.order) == list(range(n)), text
        named = [i - 1 for i in dict.fromkeys(report.read) if 1 <= i <= n]
        assert list(report.order[: len(named)]) == named, text
        assert len(report.missing) == n - len(named)
