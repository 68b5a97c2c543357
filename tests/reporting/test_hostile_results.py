"""Result files past Python's limits, or with impossible metric values, are invalid input (exit 5) naming the file,
in every reporting command: never a traceback, never a number shown x100 that no ranking can have."""

from __future__ import annotations

import json

import pytest

from r2med.cli import main

HUGE = '{"test": {"ndcg_at_10": ' + "1" * 5001 + "}}"
DEEP = '{"test": {"ndcg_at_10": 0.5, "x": ' + "[" * 100_000 + "]" * 100_000 + "}}"


def _results(tmp_path, text: str):
    folder = tmp_path / "res" / "base retriever" / "bm25"
    folder.mkdir(parents=True)
    (folder / "tiny.json").write_text(text, encoding="utf-8")
    other = tmp_path / "res" / "base retriever" / "bm25-lucene"
    other.mkdir(parents=True)
    (other / "tiny.json").write_text(json.dumps({"test": {"ndcg_at_10": 0.4}}), encoding="utf-8")
    return tmp_path / "res", folder / "tiny.json"


@pytest.mark.parametrize(("text", "reason"), [
    (HUGE, "an integer with more than 4300 digits (Python's limit for reading integers)"),
    (DEEP, "JSON nested too deeply to read (more levels than Python's recursion limit)"),
    (json.dumps({"test": {"ndcg_at_10": 5.0}}), "metric 'ndcg_at_10' is 5.0, outside [0, 1]"),
    (json.dumps({"test": {"ndcg_at_10": -0.3}}), "metric 'ndcg_at_10' is -0.3, outside [0, 1]"),
])
def test_leaderboard_and_report_refuse_a_result_they_cannot_show(tmp_path, capsys, text, reason):
    root, bad = _results(tmp_path, text)
    assert main(["leaderboard", str(root)]) == 5
    err = capsys.readouterr().err
    assert f"{bad}: {reason}" in err and "Traceback" not in err
    pytest.importorskip("matplotlib")
    assert main(["report", str(root), "--output", str(tmp_path / "page")]) == 5
    assert f"{bad}: {reason}" in capsys.readouterr().err


@pytest.mark.parametrize("text", [HUGE, DEEP])
def test_compare_refuses_a_result_past_pythons_limits(tmp_path, capsys, text):
    root, bad = _results(tmp_path, text)
    assert main(["compare", "base retriever/bm25", "base retriever/bm25-lucene", "--results", str(root)]) == 5
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
