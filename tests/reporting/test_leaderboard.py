"""r2med leaderboard: the official results tree as is, the paper's rows, coverage, every format, errors."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from decimal import ROUND_HALF_UP, Decimal

import pytest
from reporting_helpers import PROTOCOL_AVERAGES, REPORTING, package_results, run, write_official_tree

from r2med.datasets.catalog import dataset_names
from r2med.reporting.leaderboard import SystemResults, build_rows, discover
from r2med.reporting.tables import pct
from r2med.installed import install_command


@pytest.fixture(scope="module")
def official_tree(tmp_path_factory):
    return write_official_tree(tmp_path_factory.mktemp("official") / "results")


def test_official_tree_reproduces_every_published_average(official_tree):
    result = run("leaderboard", official_tree, "--format", "json")
    assert result.code == 0, result.err
    rows = {row["system"]: row for row in result.json()["rows"]}
    assert len(rows) == 71  # BEIR_NFCorpus.json beside the base retrievers is not a system's dataset
    for retriever, average in PROTOCOL_AVERAGES.items():
        row = rows[f"base retriever/{retriever}"]
        assert row["coverage"] == 8 and f"{100 * row['average']:.2f}" == f"{average:.2f}", retriever
    for path, datasets in package_results().items():  # every system, rerankers read from reranker/<short>/top_10
        published = [next(v for k, v in m.items() if k.lower() in ("ndcg_at_10", "ndcg@10")) for m in datasets.values()]
        # exact decimal mean of the published 5-decimal values, x100, half up: the table's arithmetic
        exact = (sum(Decimal(str(v)) for v in published) / 8 * 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        assert pct(rows[path]["average"]) == str(exact), path
    # the one tie of the 71: gar/hyde/qwen-72b/bge averages exactly 0.26885, binary floating point prints 26.88
    assert pct(rows["gar/hyde/qwen-72b/bge"]["average"]) == "26.89"


def test_markdown_is_sorted_by_average_with_values_x100(official_tree):
    result = run("leaderboard", official_tree)
    assert result.code == 0, result.err
    lines = [line for line in result.out.splitlines() if line.startswith("| ")][1:]
    averages = [float(line.split("|")[-3]) for line in lines]
    assert averages == sorted(averages, reverse=True) and len(lines) == 71
    bm25 = next(line for line in lines if "| base retriever/bm25 " in line)
    # BM25's published Biology nDCG@10 is 0.19188 -> 19.19; its average 15.13
    cells = [c.strip() for c in bm25.split("|")]
    assert cells[5] == "19.19" and cells[-3] == "15.13" and cells[-2] == "8/8"


def test_official_files_are_read_as_they_are(tmp_path):
    # three files of the official repository byte for byte: old dataset name, both key styles, reranker layout
    rows = {r.system: r for r in build_rows(discover(REPORTING / "official_sample" / "results"))}
    assert set(rows) == {"base retriever/bm25", "gar/hyde/gpt4/bm25", "reranker/monobert/nv/top_10"}
    assert rows["gar/hyde/gpt4/bm25"].values == {"Biology": 0.57342}
    assert rows["reranker/monobert/nv/top_10"].values == {"Biology": 0.20022}
    # the columns are the datasets the files hold (here Biology alone): each row is complete over them
    assert all(r.datasets == ("Biology",) and r.coverage == 1 and r.average == r.values["Biology"] for r in rows.values())
    # asked for R2MED's eight, each has 1 of 8 and no average
    eight = build_rows(discover(REPORTING / "official_sample" / "results"), datasets=["r2med"])
    assert all(r.coverage == 1 and r.average is None and len(r.datasets) == 8 for r in eight)


def test_with_paper_marks_published_rows_and_partial_systems_show_coverage(tmp_path):
    mine = tmp_path / "results" / "base retriever" / "mine"
    mine.mkdir(parents=True)
    for dataset, value in (("Biology", 0.5), ("MedQA-Diag", 0.3)):
        record = {"dataset_name": dataset, "model_name": "mine", "evaluation_time": "1 minutes", "test": {"ndcg_at_10": value}}
        (mine / f"{dataset}.json").write_text(json.dumps(record))
    # asked for R2MED's eight (--datasets r2med): the own system has 2 of 8 and no average
    result = run("leaderboard", tmp_path / "results", "--with-paper", "--format", "json", "--datasets", "r2med")
    assert result.code == 0, result.err
    rows = result.json()["rows"]
    # the 71 published systems, the 22 leaderboard-only rows (their average only) and the own one
    assert len(rows) == 94 and sum(r["published"] for r in rows) == 93
    own = rows[-1]  # incomplete systems come after every complete one
    assert own["system"] == "base retriever/mine" and not own["published"] and own["source"] == str(tmp_path / "results")
    assert own["coverage"] == 2 and own["average"] is None and own["covered_mean"] == pytest.approx(0.4)
    md = run("leaderboard", tmp_path / "results", "--with-paper", "--tasks", "r2med").out
    line = next(x for x in md.splitlines() if "base retriever/mine" in x)
    cells = [c.strip() for c in line.split("|")]
    assert cells[5] == "50.00" and cells[9] == "30.00" and cells[6] == "-" and cells[-4] == "-" and cells[-2] == "2/8"
    assert cells[-3] == "-"  # not on the public leaderboard
    assert "| paper " in md and "Note, MedCPT (paper)" in md and "9.02" in md


def test_csv_latex_html_formats(official_tree, tmp_path):
    pytest.importorskip("jinja2", reason='LaTeX and HTML need the "report" extra: pip install "r2med[report]"')
    table = list(csv.reader(io.StringIO(run("leaderboard", official_tree, "--format", "csv").out)))
    assert table[0] == ["rank", "system", "path", "source", *dataset_names(), "average", "coverage"]
    nv = next(r for r in table if r[2] == "base retriever/nv")
    assert nv[-2:] == ["31.43", "8/8"] and nv[4] == "27.15"  # NV-Embed-v2 Biology 0.27152
    latex = run("leaderboard", official_tree, "--format", "latex").out
    assert "\\begin{tabular}{lrrrrrrrrrr}" in latex and "\\toprule" in latex
    assert "Query2doc (gpt4) + NV-Embed-v2 & 37.01" in latex and "\\textbf{41.65}" in latex  # best average in bold
    assert "ndcg\\_at\\_10" in latex  # data text is LaTeX-escaped
    out = tmp_path / "board.html"
    assert run("leaderboard", official_tree, "--format", "html", "-o", out).code == 0
    html = out.read_text()
    assert html.count("<tr class=") == 71 and "<td class=\"num best\">41.65</td>" in html


def test_other_metric(official_tree):
    rows = run("leaderboard", official_tree, "--metric", "Recall@100", "--format", "json").json()["rows"]
    bm25 = next(r for r in rows if r["system"] == "base retriever/bm25")
    assert bm25["values"]["Biology"] == 0.45447  # recall_at_100 of the official Stack-Biology.json


def test_errors_name_the_problem(tmp_path):
    missing = run("leaderboard", tmp_path / "nope")
    assert missing.code == 4 and "nope" in missing.err
    bad = tmp_path / "results" / "base retriever" / "x"
    bad.mkdir(parents=True)
    (bad / "Biology.json").write_text('{"test": {"ndcg_at_10": 0.1,}}')
    result = run("leaderboard", tmp_path / "results")
    assert result.code == 5 and f"{bad / 'Biology.json'}:1: not valid JSON" in result.err
    (bad / "Biology.json").write_text('{"test": {"ndcg_at_10": 0.1}}')
    shutil.copy(bad / "Biology.json", bad / "Stack-Biology.json")
    twice = run("leaderboard", tmp_path / "results")
    assert twice.code == 5 and "a second result for base retriever/x on Biology" in twice.err
    (bad / "Stack-Biology.json").unlink()
    unknown = run("leaderboard", tmp_path / "results", "--metric", "ndcg_at_7")
    assert unknown.code == 2 and "available: ndcg_at_10" in unknown.err
    assert run("leaderboard").code == 4  # nothing to show


def test_rows_model_orders_complete_before_partial():
    full = SystemResults("full", "d", {ds: {"ndcg_at_10": 0.1} for ds in dataset_names()})
    part = SystemResults("part", "d", {"Biology": {"ndcg_at_10": 0.9}})
    rows = build_rows([part, full])
    assert [r.system for r in rows] == ["full", "part"]
    assert rows[0].average == pytest.approx(0.1) and rows[1].average is None and rows[1].covered_mean == 0.9


def test_register_works_with_a_wrapped_add_parser():
    # an add_parser wrapped to add the common options itself: register must not add them twice
    import argparse

    from r2med.cli import compare, leaderboard, report

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true")
    parser = argparse.ArgumentParser(prog="r2med")
    sub = parser.add_subparsers(dest="command")
    original = sub.add_parser
    sub.add_parser = lambda *a, **k: original(*a, parents=[common], **k)
    for module in (leaderboard, compare, report):
        module.register(sub, common)
    args = parser.parse_args(["leaderboard", "-q", "--with-paper"])
    assert args.quiet and args.with_paper and args.func is leaderboard.cmd_leaderboard


def test_latex_without_jinja2_names_the_extra(official_tree, monkeypatch):
    from r2med.reporting import render

    render._environment.cache_clear()
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if it were not installed
    try:
        result = run("leaderboard", official_tree, "--format", "latex")
    finally:
        render._environment.cache_clear()
    assert result.code == 3 and install_command("report") in result.err
    assert run("leaderboard", official_tree, "--format", "csv").code == 0  # the plain formats need nothing
