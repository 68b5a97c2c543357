"""An answer's ``usage`` token counts are read as a count or not at all: ``NaN``, ``Infinity`` (which Python's
``json.loads`` accepts), ``1e400``, negatives, bools, strings and huge integers count 0 and never raise; the answer
itself is still read (issue 35, the class of finding 3: numbers from a server that only look like numbers)."""

from __future__ import annotations

import json

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from r2med.llm.client import ChatClient  # noqa: E402

ANSWER = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}


def usage_of(body: str) -> tuple[int, int, str]:
    client = ChatClient("m", "http://127.0.0.1:9/v1")
    answer = json.loads(body)  # as the HTTP stack decodes a 2xx body
    choice, prompt, completion = client._choice(answer)
    assert (client.usage.prompt_tokens, client.usage.completion_tokens) == (prompt, completion)
    return prompt, completion, choice["message"]["content"]


@pytest.mark.parametrize("written, counted", [
    ("NaN", 0), ("Infinity", 0), ("-Infinity", 0), ("1e400", 0), ("-3", 0), ("true", 0), ('"12"', 0),
    ("null", 0), ("12", 12), ("12.0", 12), ("12.7", 12), ("1" + "0" * 400, 0),
])
def test_a_usage_count_that_is_not_a_count_counts_zero(written, counted):
    body = '{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], ' \
           f'"usage": {{"prompt_tokens": {written}, "completion_tokens": 5}}}}'
    assert usage_of(body) == (counted, 5, "ok")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 60), max_value=2 ** 60) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, JSON_VALUES)
def test_any_usage_is_read_without_raising(prompt, completion):
    body = json.dumps({**ANSWER, "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    got_prompt, got_completion, text = usage_of(body)
    assert text == "ok"
    for value, got in ((prompt, got_prompt), (completion, got_completion)):
        assert isinstance(got, int) and got >= 0
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 53:
            assert got == value
