"""Property tests (hypothesis): the reasoning-output parsers are total (any text, any style: a ``ParsedOutput`` / a
string out, never an exception), and ``authors_answer`` finds what the official R2MED regexes find, in linear time."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from r2med.llm.reasoning import (  # noqa: E402
    AUTHORS_SEARCH_R1,
    AUTHORS_SKY,
    STYLES,
    ParsedOutput,
    authors_answer,
    choose_answer,
    detect_style,
    first_pair,
    split_reasoning,
)

SOME = settings(max_examples=300, deadline=None)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=200)
ATOMS = ["<think>", "</think>", "<answer>", "</answer>", "<|begin_of_solution|>", "<|end_of_solution|>",
         "<|begin_of_thought|>", "<|end_of_thought|>", "## Thinking", "## Final Response", "Final Response", "**", ":",
         " ", "\n", "\t", "\u2003", "\x1c", "a", "B", "<search>", "</search>", "<information>"]
TEXT = st.one_of(st.lists(st.sampled_from(ATOMS), max_size=25).map("".join), ANY_TEXT)
STYLE = st.sampled_from(("auto", *STYLES))


@SOME
@given(TEXT, STYLE, st.one_of(st.none(), TEXT))
def test_split_reasoning_and_choose_answer_are_total(text, style, reasoning_content):
    parsed = split_reasoning(text, style=style, reasoning_content=reasoning_content)
    assert isinstance(parsed, ParsedOutput) and parsed.style in STYLES
    assert isinstance(parsed.reasoning, str) and isinstance(parsed.answer, str)
    assert not (parsed.truncated and parsed.answer)
    for policy in ("fallback", "authors"):
        answer, fell_back = choose_answer(parsed, fallback="q", policy=policy)
        assert isinstance(answer, str) and isinstance(fell_back, bool)
    assert detect_style(text) in STYLES


@SOME
@given(TEXT)
def test_authors_answer_is_what_the_official_regexes_find(text):
    sky = AUTHORS_SKY.search(text)
    assert authors_answer(text, style="sky-t1") == (sky.group(1).strip() if sky else text)
    found = AUTHORS_SEARCH_R1.findall(text)
    assert authors_answer(text, style="search-r1") == (found[0].strip() if found else text)
    for style in ("auto", *STYLES):
        assert isinstance(authors_answer(text, style=style), str)


@SOME
@given(TEXT, st.sampled_from(["<a>", "<answer>", "aa", "<"]), st.sampled_from(["</a>", "</answer>", "a", ">"]))
def test_first_pair_is_the_lazy_regex(text, start, end):
    import re

    match = re.search(re.escape(start) + "(.*?)" + re.escape(end), text, re.DOTALL)
    assert first_pair(text, start, end) == (match.group(1) if match else None)


def test_many_unclosed_tags_are_read_in_linear_time():
    """The official regexes backtrack over every unclosed opening tag (200,000 of them: minutes); the same answer
    comes back at once."""
    text = "<|begin_of_solution|>" * 200_000
    assert authors_answer(text, style="sky-t1") == text
    text = "<answer>" * 200_000 + "x"
    assert authors_answer(text, style="search-r1") == text
