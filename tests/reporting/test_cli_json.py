"""--json on every reporting command: leaderboard and compare print what --format json prints (the two together
ask for one format or fail with exit 2); report prints a summary of the page it wrote."""

from __future__ import annotations

import pytest
from reporting_helpers import REPORTING, run

from r2med.datasets.local import load_dir
from r2med.evaluation import evaluate
from r2med.store.results import SystemPath, write_result
from r2med.types import Run

DATASETS = REPORTING / "datasets"

#: nDCG@10 on the tiny Biology set (trec_eval gains = grades): "good" ranks every query ideally (1.0 each);
#: "half" finds q1's d1 only (1 / (1 + 1/log2 3) = 0.61315), q2 ideally (1), q3 nothing (0), q4 ideally (1):
#: mean 0.65329. good - half: 0.38685, 0, 1, 0 -> mean 0.34671, wins/ties/losses 2/2/0.
RUNS = {
    "good": Run({"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d7": 2.0, "d6": 1.0}, "q3": {"d5": 1.0}, "q4": {"d8": 1.0}}),
    "half": Run({"q1": {"d1": 1.0}, "q2": {"d7": 2.0, "d6": 1.0}, "q3": {"d4": 1.0}, "q4": {"d8": 1.0}}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("json") / "results"
    dataset = load_dir(DATASETS / "Biology", "Biology")
    for name, ranking in RUNS.items():
        write_result(out, SystemPath.base(name), "Biology", evaluate(dataset.qrels, ranking), ranking, seconds=1.0)
    return out


def test_leaderboard_json_is_format_json(results):
    shown = run("leaderboard", results, "--json")
    assert shown.code == 0, shown.err
    assert shown.out == run("leaderboard", results, "--format", "json").out
    assert run("leaderboard", results, "--json", "--format", "json").out == shown.out
    rows = shown.json()["rows"]
    assert [(r["system"], r["values"], r["coverage"]) for r in rows] == [
        ("base retriever/good", {"Biology": 1.0}, 1), ("base retriever/half", {"Biology": 0.65329}, 1)]
    assert shown.json()["datasets"] == ["Biology"]


def test_compare_json_is_format_json(results):
    argv = ("compare", "good", "half", "--results", results / "base retriever", "--n-resamples", 100)
    shown = run(*argv, "--json")
    assert shown.code == 0, shown.err
    assert shown.out == run(*argv, "--format", "json").out
    (row,) = shown.json()["datasets"]
    assert row["dataset"] == "Biology" and row["difference"] == pytest.approx(0.34671, abs=5e-6)
    test = row["test"]
    assert (test["n"], test["wins"], test["losses"]) == (4, 2, 0)


@pytest.mark.parametrize("command", ["leaderboard", "compare"])
def test_json_and_another_format_is_a_usage_error(results, command):
    argv = [results] if command == "leaderboard" else ["good", "half", "--results", results / "base retriever"]
    refused = run(command, *argv, "--json", "--format", "md")
    assert refused.code == 2 and refused.out == ""
    assert refused.err == "r2med: error: --json and --format md ask for two formats; give one of them\n"


@pytest.mark.parametrize("quiet", [False, True])
def test_report_json_summarises_the_page(results, tmp_path, cli, quiet):
    pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
    pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')
    path = tmp_path / "r.html"
    done = cli(*(["-q"] if quiet else []), "report", results, "-o", path, "--n-resamples", 100, "--json")
    assert done.code == 0, done.err
    summary = done.json()
    warnings = summary.pop("warnings")
    assert summary == {"report": str(path), "drill_pages": [], "result_dir": str(results), "metric": "ndcg_at_10",
                       "systems": ["base retriever/good", "base retriever/half"], "published_systems": 0,
                       "datasets": ["Biology"]}
    assert path.is_file()
    # without --data-dir nor the hub cache the drill-down has no texts: said on stderr (not with -q) and in the JSON
    (said,) = warnings
    assert said.startswith("Biology: texts and judgements not shown") and "r2med datasets download Biology" in said
    assert (said in done.err) is not quiet


def test_report_json_counts_the_published_systems(results, tmp_path, cli):
    pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
    pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')
    done = cli("report", results, "-o", tmp_path / "r.html", "--n-resamples", 100, "--data-dir", DATASETS,
               "--with-paper", "--datasets", "Biology", "--json")
    assert done.code == 0, done.err
    summary = done.json()
    # all 71 published systems have Biology; the good run (1.0) ranks above every one of them
    assert summary["published_systems"] == 71 and summary["datasets"] == ["Biology"] and summary["warnings"] == []
    assert summary["systems"] == ["base retriever/good", "base retriever/half"]
