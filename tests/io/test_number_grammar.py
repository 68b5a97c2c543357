"""The one number grammar (r2med.numbers) against its reference, C strtod/strtol, and in every file reader.

Finding 2 of issue 35: a run score ``0_9`` or ``١٢`` (Arabic-Indic digits) was read by Python's float() as 9.0 or
12.0 (exit 0) where trec_eval's atof reads neither.
"""

from __future__ import annotations

import ctypes
import math
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from r2med.cli import main
from r2med.errors import InvalidInputError
from r2med.numbers import NumberError, parse_decimal, parse_integer, parse_score
from r2med.io.problems import Problems
from r2med.io.readers import coerce_relevance
from r2med.store.runs import read_run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reference is glibc's strtod")

_LIBC = ctypes.CDLL(None)
_LIBC.strtod.restype = ctypes.c_double
_LIBC.strtod.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
_LIBC.strtol.restype = ctypes.c_long
_LIBC.strtol.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
_C_SPACE = b" \t\n\v\f\r"


def _whole(function, text: str, *args):
    """(value, True) when the C function reads all of ``text`` (white space after it aside), else (None, False)."""
    if not text.isascii() or "\x00" in text:
        return None, False  # trec_eval reads bytes in the C locale: no non-ASCII digit is a digit there
    raw = text.encode("ascii")
    buffer = ctypes.create_string_buffer(raw)
    end = ctypes.c_char_p()
    value = function(ctypes.cast(buffer, ctypes.c_char_p), ctypes.byref(end), *args)
    used = (ctypes.cast(end, ctypes.c_void_p).value or 0) - ctypes.addressof(buffer)
    return value, used > 0 and raw[used:].strip(_C_SPACE) == b""


def _ours(function, text: str):
    try:
        return function(text), True
    except NumberError:
        return None, False


NUMBERISH = st.text(alphabet="0123456789.eE+-xXpPaAbBcCdDfFiInNtTyY()_ \t\n\v\f\r١٢٠۳", max_size=14)


@settings(max_examples=300, deadline=None)
@given(st.one_of(NUMBERISH, st.text(max_size=12)))
@example("0_9")
@example("١٢")
@example("0x1.8p3")
@example("0x")
@example("1e")
@example("nan(0_9)")
@example("-INFINITY")
@example("0x1p99999")
@example(" .5 ")
@example(".")
def test_decimal_grammar_is_strtods(text: str) -> None:
    expected, accepted = _whole(_LIBC.strtod, text)
    value, ours = _ours(parse_decimal, text)
    assert ours == accepted, (text, expected)
    if accepted:
        assert (math.isnan(value) and math.isnan(expected)) or value == expected
        assert math.copysign(1, value) == math.copysign(1, expected) or math.isnan(value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(alphabet="0123456789+-_ \t\n١x", max_size=12), st.text(max_size=8)))
@example("1_0")
@example("١")
@example("+")
def test_integer_grammar_is_strtols(text: str) -> None:
    expected, accepted = _whole(_LIBC.strtol, text, 10)
    value, ours = _ours(parse_integer, text)
    assert ours == accepted, (text, expected)
    if accepted:
        assert value == expected


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=10).filter(lambda t: not t.isascii()))
def test_nothing_non_ascii_is_a_number(text: str) -> None:
    with pytest.raises(NumberError):
        parse_decimal(text)
    with pytest.raises(NumberError):
        parse_integer(text)


def test_python_reads_what_strtod_does_not() -> None:
    """The defect itself: Python's float() reads both; strtod (the reference) reads neither."""
    assert float("0_9") == 9.0 and float("١٢") == 12.0
    assert _whole(_LIBC.strtod, "0_9")[1] is False
    with pytest.raises(NumberError, match="holds '_'"):
        parse_score("0_9")


@pytest.mark.parametrize("score, why", [
    ("0_9", "holds '_'"),
    ("١٢", "non-ASCII character '١' \\(U\\+0661\\)"),
    ("0.9abc", "is not a number trec_eval reads"),
    ("nan", "is NaN"),
    ("-inf", "is infinite"),
    ("1e999", "past the largest double"),
])
def test_trec_run_refuses_with_file_and_line(tmp_path, score: str, why: str) -> None:
    path = tmp_path / "bad.run"
    path.write_text(f"q1 Q0 d1 1 1.5 t\nq1 Q0 d2 2 {score} t\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=f"{path}:2: score .*{why}") as caught:
        read_run(path)
    assert caught.value.exit_code == 5
    assert len(caught.value.problems) == 1


def test_trec_run_reads_strtods_forms(tmp_path) -> None:
    path = tmp_path / "ok.run"
    path.write_text("q1 Q0 d1 1 0x1.8p1 t\nq1 Q0 d2 2 -1.5E+2 t\nq1 Q0 d3 3 .5 t\nq1 Q0 d4 4 7 t\n", encoding="utf-8")
    assert dict(read_run(path)["q1"]) == {"d1": 3.0, "d2": -150.0, "d3": 0.5, "d4": 7.0}


def test_topk_jsonl_string_scores_use_the_grammar(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "q1", "topk_pid": [["d1", 0.5], ["d2", "0_9"], ["d3", true], ["d4", "2.5"]]}\n',
                    encoding="utf-8")
    with pytest.raises(InvalidInputError) as caught:
        read_run(path)
    problems = caught.value.problems
    assert len(problems) == 2
    assert problems[0].startswith(f"{path}:1: score '0_9' is not a number trec_eval reads (it holds '_'")
    assert problems[1] == f"{path}:1: score True is not a number (a JSON boolean); write the score as a JSON number"
    path.write_text('{"id": "q1", "topk_pid": [["d1", 0.5], ["d4", "2.5"]]}\n', encoding="utf-8")
    assert dict(read_run(path)["q1"]) == {"d1": 0.5, "d4": 2.5}


@pytest.mark.parametrize("grade, why", [("1_0", "holds '_'"), ("١", "non-ASCII"), ("1.5", "must be an integer")])
def test_qrels_grade_grammar(grade: str, why: str) -> None:
    problems = Problems()
    assert int(grade.replace("1.5", "1")) in (10, 1)  # Python's int() reads the first two
    assert coerce_relevance(grade, path="q.tsv", line=4, problems=problems) is None
    assert len(problems.errors) == 1 and problems.errors[0].startswith("q.tsv:4: relevance ")
    assert why in problems.errors[0]


def test_qrels_grades_that_fit(tmp_path) -> None:
    problems = Problems()
    assert [coerce_relevance(v, path="q", line=1, problems=problems) for v in ("2", " -1", "+0", 3, 1.0)] == [2, -1, 0, 3, 1]
    assert coerce_relevance("9" * 5000, path="q", line=2, problems=problems) is None
    assert "does not fit in 32 bits" in problems.errors[0]


def test_cli_evaluate_exit_5_names_the_line(tmp_path, capsys) -> None:
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 d1 1 0_9 t\n", encoding="utf-8")
    qrels = tmp_path / "q.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    code = main(["evaluate", "--run", str(run), "--qrels", str(qrels)])
    err = capsys.readouterr().err
    assert code == 5
    assert f"{run}:1: score '0_9' is not a number trec_eval reads (it holds '_'" in err


def test_jsonl_files_are_written_in_strict_json(tmp_path):
    """Every JSON-lines file the stages write (``write_jsonl_atomic``: the agent's trajectories beside its run, stage
    products) refuses NaN and Infinity naming the file, and leaves no file behind (issue 35, finding 3's class)."""
    from r2med.errors import InvalidInputError
    from r2med.io.atomic import write_jsonl_atomic

    path = tmp_path / "rows.jsonl"
    write_jsonl_atomic(path, [{"score": 1.5, "text": "é"}])
    assert path.read_text(encoding="utf-8") == '{"score": 1.5, "text": "é"}\n'
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(InvalidInputError, match=r"rows2.jsonl: not written: Out of range float values"):
            write_jsonl_atomic(tmp_path / "rows2.jsonl", [{"ok": 1}, {"score": bad}])
        assert not (tmp_path / "rows2.jsonl").exists()
