"""Property tests (hypothesis): the agents' readers of model output (Search-R1's search/answer tags, Search-o1's
query and condensed-information extraction) are total and find what the authors' regexes find, in linear time."""

from __future__ import annotations

import re

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from r2med.agent.styles import (  # noqa: E402
    BEGIN_SEARCH_QUERY,
    END_SEARCH_QUERY,
    first_between,
    last_between,
    o1_condensed,
    o1_prev_reasoning,
    opens_unclosed,
    r1_eval_action,
    r1_eval_response,
    r1_infer_query,
)

SOME = settings(max_examples=300, deadline=None)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=200)
ATOMS = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<information>", " ", "\n", "\n\n",
         "q", "A", BEGIN_SEARCH_QUERY, END_SEARCH_QUERY, "\n**Final Information**", "\n**Modified Reasoning Steps**",
         "`", "<|begin_search_result|>"]
TEXT = st.one_of(st.lists(st.sampled_from(ATOMS), max_size=25).map("".join), ANY_TEXT)


@SOME
@given(TEXT)
def test_search_r1_readers_are_the_authors_regexes(text):
    match = re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)
    assert r1_eval_action(text) == ((match.group(1), match.group(2).strip()) if match else (None, ""))
    found = re.findall(r"<search>(.*?)</search>", text, flags=re.DOTALL)
    assert r1_infer_query(text) == (found[-1] if found else None)
    if "</search>" in text:
        expected = text.split("</search>")[0] + "</search>"
    elif "</answer>" in text:
        expected = text.split("</answer>")[0] + "</answer>"
    else:
        expected = text
    assert r1_eval_response(text) == expected


@SOME
@given(TEXT)
def test_search_o1_readers_are_the_authors_and_total(text):
    pattern = re.escape(BEGIN_SEARCH_QUERY) + r"(.*?)" + re.escape(END_SEARCH_QUERY)
    found = re.findall(pattern, text, flags=re.DOTALL)
    assert last_between(text, BEGIN_SEARCH_QUERY, END_SEARCH_QUERY) == (found[-1].strip() if found else None)
    first = re.search(pattern, text, flags=re.DOTALL)
    assert first_between(text, BEGIN_SEARCH_QUERY, END_SEARCH_QUERY) == (first.group(1).strip() if first else None)
    info, steps = "\n**Final Information**", "\n**Modified Reasoning Steps**"
    if info in text:
        expected = text.split(info)[-1].replace("\n", "").strip("`").strip()
    elif steps in text:
        expected = text.split(steps)[-1].strip("`").strip()
    else:
        expected = "No helpful information found."
    assert o1_condensed(text) == expected
    assert isinstance(o1_prev_reasoning(text), str)
    assert isinstance(opens_unclosed(text, "<search>", "</search>"), bool)


def test_many_unclosed_tags_are_read_in_linear_time():
    """re.search/findall of a lazy pair backtrack over every unclosed opening tag (100,000: minutes)."""
    text = "<search>" * 50_000 + "<answer>" * 50_000
    assert r1_eval_action(text) == (None, "") and r1_infer_query(text) is None
    assert last_between(text, "<search>", "</search>") is None
