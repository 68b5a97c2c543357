"""Inputs past Python's and pytrec_eval's limits are invalid input with file:line, never a traceback or a wrong number."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import DATA
from json_decoders import json_decoder  # noqa: F401 (autouse: every test with msgspec and with json alone)
from r2med.errors import InvalidInputError
from r2med.io.jsonsafe import JSONLimitError, loads
from r2med.io.problems import Problems
from r2med.io.readers import HashingLines, coerce_relevance, iter_jsonl, iter_qrels_lines

HUGE = "1" * 5000
DEEP = "[" * 100_000 + "]" * 100_000


def _rows(path):
    problems = Problems()
    rows = list(iter_jsonl(HashingLines(path, problems)))
    return rows, problems.errors


def test_an_integer_past_the_digit_limit_is_a_line_error(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(f'{{"id": "d1", "text": "a"}}\n{{"id": {HUGE}, "text": "b"}}\n{{"id": "d3", "text": "c"}}\n')
    rows, errors = _rows(path)
    assert [number for number, _ in rows] == [1, 3]
    assert errors == [(f"{path}:2: an integer with more than 4300 digits (Python's limit for reading integers); "
                       "fix or remove the line")]


@pytest.mark.parametrize("text", [DEEP, '{"id": "d1", "text": ' + DEEP + "}", '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_deeply_nested_json_is_a_line_error(tmp_path, text):
    path = tmp_path / "query.jsonl"
    path.write_text('{"id": "q1", "text": "a"}\n' + text + "\n")
    rows, errors = _rows(path)
    assert [number for number, _ in rows] == [1]
    assert errors == [(f"{path}:2: JSON nested too deeply to read (more levels than Python's recursion limit); "
                       "fix or remove the line")]


@pytest.mark.parametrize("value,shown", [
    (2**31, "2147483648"), (-(2**31), "-2147483648"), (4294967296, "4294967296"), ("4294967296", "4294967296"),
    (1e10, "10000000000"), (HUGE, "1111111111...1111111111 (5000 digits)"),
])
def test_relevance_beyond_32_bits_is_refused(value, shown):
    problems = Problems()
    assert coerce_relevance(value, path="q", line=7, problems=problems) is None
    assert problems.errors == [(f"q:7: relevance {shown} does not fit in 32 bits (pytrec_eval reads grades as C ints: "
                                "-2147483647 to 2147483647); use small grades such as 0, 1, 2")]


def test_relevance_at_the_32_bit_bounds_passes():
    problems = Problems()
    assert coerce_relevance(2**31 - 1, path="q", line=1, problems=problems) == 2**31 - 1
    assert coerce_relevance(" -2147483647 ", path="q", line=2, problems=problems) == -(2**31 - 1)
    assert problems.errors == []


@pytest.mark.parametrize("name,line", [
    ("qrels.jsonl", '{"q_id": "q1", "p_id": "d1", "score": 4294967296}\n'),
    ("qrels.txt", "q1 0 d1 4294967296\n"),
])
def test_qrels_readers_and_validate_refuse_grades_pytrec_eval_would_wrap(tmp_path, cli, name, line):
    folder = tmp_path / "ds"
    shutil.copytree(DATA / "tiny", folder)
    (folder / "qrels.jsonl").unlink()
    (folder / name).write_text(line)
    problems = Problems()
    assert list(iter_qrels_lines(HashingLines(folder / name, problems))) == []
    message = (f"{folder / name}:1: relevance 4294967296 does not fit in 32 bits (pytrec_eval reads grades as C ints: "
               "-2147483647 to 2147483647); use small grades such as 0, 1, 2")
    assert problems.errors == [message]
    result = cli("datasets", "validate", "--data-dir", folder)
    assert result.code == 5 and f"  error: {message}" in result.out
    run = cli("run", "--data-dir", folder, "--output", tmp_path / "out", "--no-cache")  # was nDCG@10 0.00, exit 0
    assert run.code == 5 and message in run.err


def test_dataset_with_a_huge_integer_id_is_invalid_input(tmp_path, cli):
    folder = tmp_path / "ds"
    shutil.copytree(DATA / "tiny", folder)
    with (folder / "corpus.jsonl").open("a") as handle:
        handle.write(f'{{"id": {HUGE}, "text": "x"}}\n')
    result = cli("run", "--data-dir", folder, "--output", tmp_path / "out", "--no-cache")
    assert result.code == 5
    assert f"{folder / 'corpus.jsonl'}:5: an integer with more than 4300 digits" in result.err


def test_expansion_and_cache_files_with_deep_json_are_invalid_input(tmp_path):
    from r2med.expansion.published import read_expansions
    from r2med.llm.cache import ResponseCache
    from r2med.rerankers.score_cache import ScoreCache

    path = tmp_path / "query_with_hydoc.jsonl"
    path.write_text('{"id": "q1", "hy_doc": ' + DEEP + "}\n")
    with pytest.raises(InvalidInputError) as err:
        read_expansions(path, method="hyde", llm="x")
    assert f"{path}:1: JSON nested too deeply to read" in str(err.value)
    cache = tmp_path / "responses.jsonl"
    cache.write_text(DEEP + "\n" + '{"key": "k", "text": "a"}\n')
    with pytest.raises(InvalidInputError, match=r"responses\.jsonl:1"):
        ResponseCache(cache)
    scores = tmp_path / "scores.jsonl"
    scores.write_text(DEEP + "\n")
    with pytest.raises(InvalidInputError, match=r"scores\.jsonl:1: not a score record"):
        ScoreCache(scores, {"scorer": "x"})


# msgspec reads first where it can; whatever it refuses or could read differently, json reads (r2med.io.jsonsafe)
@pytest.mark.parametrize("text, expected", [
    ('{"a": 1, "b": 2, "a": 3}', {"a": 3, "b": 2}),  # duplicate keys: the last wins, in the first one's place
    ('{"n": 123456789012345678901234567890}', {"n": 123456789012345678901234567890}),  # exact, not a float
    ('{"n": -9223372036854775809}', {"n": -9223372036854775809}),
    ('{"x": 9007199254740993.0}', {"x": 9007199254740992.0}),  # correctly rounded
    ('{"x": 1e400, "y": -1e400}', {"x": float("inf"), "y": float("-inf")}),  # msgspec refuses: json's infinities
    ('{"s": "\\ud800"}', {"s": "\ud800"}),  # a lone surrogate escape: msgspec refuses, json keeps it
    (" \t{\"a\": [1, {\"b\": null}]}\r\n", {"a": [1, {"b": None}]}),
])
def test_loads_values_are_jsons(text, expected):
    value = loads(text)
    assert value == expected and list(value) == list(expected)
    assert [type(v) for v in value.values()] == [type(v) for v in expected.values()]


def test_loads_nan_is_jsons():
    assert math.isnan(loads('{"x": NaN}')["x"]) and loads('{"x": Infinity}')["x"] == float("inf")


@pytest.mark.parametrize("text", ['{"a": 1}x', '{"a": 1,}', '\ufeff{"a": 1}', '{"a": "x\ty"}', '{"a": 01}', "[1,]"])
def test_loads_refuses_what_json_refuses(text):
    with pytest.raises(json.JSONDecodeError) as caught:
        loads(text)
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(text)
    assert (caught.value.msg, caught.value.pos) == (reference.value.msg, reference.value.pos)


def test_loads_nesting_past_the_guard_is_read_by_json():
    depth = 900  # past the guard: json reads it (or refuses it past its recursion limit) whatever msgspec would do
    text = "[" * depth + "]" * depth
    try:
        expected = json.loads(text)
    except RecursionError:
        with pytest.raises(JSONLimitError):
            loads(text)
    else:
        assert loads(text) == expected
