"""r2med report and names that matplotlib would read as markup, and where matplotlib keeps its caches."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from reporting_helpers import REPORTING, run

from r2med.datasets.local import load_dir
from r2med.evaluation import evaluate
from r2med.store.results import SystemPath, write_result
from r2med.types import Run

pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')

SRC = Path(__file__).resolve().parents[2] / "src"
#: names r2med accepts that matplotlib's mathtext reads as math: "$$" (empty math: an error), "$x^2$" (a formula)
SYSTEMS = ("cost $$ model", "$x^2$ model")
DATASET = "Bio$$logy"


def _results(out: Path) -> Path:
    """Two systems with dollar names on a dataset with a dollar name (the tiny Biology set's judgements)."""
    qrels = load_dir(REPORTING / "datasets" / "Biology", "Biology").qrels
    runs = (Run({"q1": {"d1": 3.0, "d3": 2.0}, "q2": {"d6": 1.0}, "q3": {"d5": 1.0}, "q4": {"d8": 1.0}}),
            Run({"q1": {"d4": 3.0}, "q2": {"d3": 1.0}, "q3": {"d4": 1.0}, "q4": {"d8": 1.0}}))
    for name, ranking in zip(SYSTEMS, runs):
        write_result(out, SystemPath.base(name), DATASET, evaluate(qrels, ranking), ranking, seconds=1.0)
    return out


def test_names_reach_the_plots_as_plain_text(tmp_path):
    results = _results(tmp_path / "results")
    page = tmp_path / "report.html"
    done = run("report", results, "-o", page, "--n-resamples", 100)
    assert done.code == 0, done.err
    html = page.read_text(encoding="utf-8")
    assert html.count("<svg") == 2  # the leaderboard's bars and the win/loss panels
    # the SVG keeps its text as text (svg.fonttype none): each name is one <text> as written, not typeset as math
    texts = re.findall(r"<text [^>]*>([^<]*)</text>", html)
    assert {f"base retriever/{name}" for name in SYSTEMS} <= set(texts)  # the bars' tick labels
    assert DATASET in texts  # the leaderboard panel's title
    assert f"{DATASET}: 3/1/0, p=0.25" in texts  # the win/loss panel's title (wins q1-q3, tie q4; exact p 2/8)

def _home_tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_matplotlib_caches_go_under_r2med_home(tmp_path):
    """A fresh process (matplotlib not yet imported), HOME and XDG folders of its own: after the report, matplotlib's
    config and font cache are under R2MED_HOME, nothing under HOME; the library itself sets no environment."""
    results = _results(tmp_path / "results")
    home, r2med_home = tmp_path / "user", tmp_path / "r2med-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update({"HOME": str(home), "R2MED_HOME": str(r2med_home), "PYTHONPATH": str(SRC)})
    done = subprocess.run([sys.executable, "-m", "r2med.cli", "report", str(results), "-o", str(tmp_path / "r.html"),
                           "--n-resamples", "50", "-q"], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert _home_tree(home) == set()  # no ~/.cache/matplotlib, no ~/.config/matplotlib
    assert any(name.startswith("fontlist-") for name in os.listdir(r2med_home / "matplotlib"))
    # the library, called directly, leaves the environment alone
    probe = ("import os, sys; from pathlib import Path; from r2med.reporting.report import ReportOptions, write_report; "
             "write_report(Path(sys.argv[1]), Path(sys.argv[2]), ReportOptions(n_resamples=50)); "
             "print(os.environ.get('MPLCONFIGDIR'))")
    library = subprocess.run([sys.executable, "-c", probe, str(results), str(tmp_path / "lib.html")], env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert library.returncode == 0, library.stderr
    assert library.stdout.strip() == "None"
