"""Plots outside the report (issue 38, finding 9): ``r2med leaderboard --plot`` (systems x datasets, the paper's
number beside each system it published) and ``r2med compare A B --plot`` (every paired query's difference, sorted,
the pooled test's result in the title). The tests read the files: the SVG's bars (their ids name the source, the
column and the system) and texts, the PNG's size and pixels; the same input gives the same bytes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from reporting_helpers import run

from r2med.store.results import SystemPath, write_result
from r2med.types import Run, Scores

pytest.importorskip("matplotlib")
SVG = "{http://www.w3.org/2000/svg}"


def _write(out, system, dataset, values):
    per_query = {qid: {"ndcg_at_10": float(v)} for qid, v in values.items()}
    scores = Scores({"ndcg_at_10": float(np.mean(list(values.values())))}, per_query)
    write_result(out, SystemPath.base(system), dataset, scores, Run({q: {"d1": 1.0} for q in values}), seconds=1.0)


@pytest.fixture()
def results(tmp_path):
    """bm25 (a system the paper published) and 'mine' on Biology (4 queries) and MedQA-Diag (2 queries):
    bm25 - mine per query: +0.5, +0.25, 0, -0.25 on Biology; +0.5, +0.5 on MedQA-Diag."""
    out = tmp_path / "results"
    _write(out, "bm25", "Biology", {"q1": 1.0, "q2": 0.75, "q3": 0.5, "q4": 0.25})
    _write(out, "mine", "Biology", {"q1": 0.5, "q2": 0.5, "q3": 0.5, "q4": 0.5})
    _write(out, "bm25", "MedQA-Diag", {"m1": 0.5, "m2": 0.5})
    _write(out, "mine", "MedQA-Diag", {"m1": 0.0, "m2": 0.0})
    return out


def _svg(path):
    root = ET.parse(path).getroot()
    bars = sorted(g.get("id") for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("bar:"))
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    return bars, texts


def test_leaderboard_plot_svg_has_every_system_and_the_papers_numbers_beside(results, tmp_path):
    plot = tmp_path / "board.svg"
    shown = run("leaderboard", results, "--plot", plot)
    assert shown.code == 0 and "| base retriever/mine " in shown.out  # the table is printed as without --plot
    bars, texts = _svg(plot)
    columns = ("Biology", "MedQA-Diag", "Avg (2 datasets)")
    own = [f"bar:own:{c}:base retriever/{s}" for c in columns for s in ("bm25", "mine")]
    paper = [f"bar:paper:{c}:base retriever/bm25" for c in columns]  # 'mine' is not published: no paper bar
    assert bars == sorted(own + paper)
    # own values: bm25 62.50 and 50.00 (avg 56.25), mine 50.00 and 0.00 (avg 25.00); the paper's BM25: 19.19, 2.55
    # (0.19188, 0.02551) and their mean 10.87 (0.108695, half up)
    assert [t for t in texts if t[:1].isdigit() and "." in t] == [  # per panel: bm25, mine, the paper's bm25
        "62.50", "50.00", "19.19", "50.00", "0.00", "2.55", "56.25", "25.00", "10.87"]
    assert {"Biology", "MedQA-Diag", "Avg (2 datasets)", "base retriever/bm25", "base retriever/mine"} <= set(texts)
    again = tmp_path / "again.svg"
    assert run("leaderboard", results, "--plot", again).code == 0
    assert again.read_bytes() == plot.read_bytes() and b"<dc:date>" not in plot.read_bytes()


def test_leaderboard_plot_png_is_a_picture_of_the_bars(results, tmp_path):
    from PIL import Image

    plot = tmp_path / "board.png"
    assert run("leaderboard", results, "--plot", plot).code == 0
    with Image.open(plot) as image:
        width, height = image.size
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert 1500 < width < 3000 and 300 < height < width / 3  # three panels side by side in one row, at 150 dpi
    own = np.all(pixels == (0x1F, 0x77, 0xB4), axis=1).sum()  # r2med's bars
    paper = np.all(pixels == (0x9E, 0x9E, 0x9E), axis=1).sum()  # the paper's (hatched: white lines across)
    assert own > 5000 and paper > 500 and (pixels != 255).any(axis=1).mean() > 0.05
    second = tmp_path / "second.png"
    assert run("leaderboard", results, "--plot", second).code == 0 and second.read_bytes() == plot.read_bytes()


def test_compare_plot_shows_the_sorted_differences_and_the_test_in_its_title(results, tmp_path):
    plot = tmp_path / "cmp.svg"
    shown = run("compare", "bm25", "mine", "--results", results, "--plot", plot, "--n-resamples", "500")
    assert shown.code == 0 and "| Biology " in shown.out
    root = ET.parse(plot).getroot()
    ids = {g.get("id") for g in root.iter(f"{SVG}g")}
    assert {"wins", "losses"} <= ids  # pooled: 4 wins, 1 tie, 1 loss
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    # pooled over the 6 queries: mean of (+50, +25, 0, -25, +50, +50) = +25.00
    title = [t for t in texts if t.startswith("base retriever/bm25 - base retriever/mine")]
    assert title == ["base retriever/bm25 - base retriever/mine, ndcg_at_10 x100 over 6 queries of 2 datasets: "
                     "mean +25.00 (95% CI " + title[0].split("(95% CI ")[1]]
    assert any(t.startswith("not significant at 0.05: permutation p = ") and t.endswith("A wins/ties/loses 4/1/1")
               for t in texts)
    assert any(t.startswith("Biology: 2/1/1, p = ") for t in texts)
    assert any(t.startswith("MedQA-Diag: 2/0/0, p = ") for t in texts)


def test_a_plot_file_of_another_kind_is_refused_before_any_work(results, tmp_path):
    bad = run("leaderboard", results, "--plot", tmp_path / "board.pdf")
    assert bad.code == 2 and bad.out == ""
    assert f"--plot {tmp_path / 'board.pdf'}: the file must end in .png or .svg" in bad.err
    assert run("compare", "bm25", "mine", "--results", results, "--plot", tmp_path / "x.jpg").code == 2


def test_every_query_is_one_step_of_its_sign():
    """The sorted differences are steps: each query's own height, wins green above the line, losses red below."""
    from matplotlib.figure import Figure

    from r2med.reporting.plots import _win_loss_axes

    ax = Figure().subplots()
    _win_loss_axes(ax, [-0.25, 0.5, 0.0, 0.25, 0.5, 0.5])
    steps = {patch.get_gid(): patch.get_data().values.tolist() for patch in ax.patches}
    assert steps == {"wins": [50.0, 50.0, 50.0, 25.0, 0.0, 0.0], "losses": [0.0, 0.0, 0.0, 0.0, 0.0, -25.0]}


def test_a_plot_of_published_numbers_is_refused_before_the_tests(results, tmp_path):
    """The paper publishes aggregates: nothing per query to plot (exit 2 before any work); a folder without
    per-query files has none either (exit 4, after the table, naming what is missing)."""
    refused = run("compare", "bm25", "paper:base retriever/bm25", "--results", results, "--plot", tmp_path / "p.svg")
    assert refused.code == 2 and refused.out == "" and not (tmp_path / "p.svg").exists()
    assert "paper:base retriever/bm25 has only the paper's aggregate numbers" in refused.err
    for per_query in results.rglob("*.per_query.jsonl"):
        per_query.unlink()
    none = run("compare", "bm25", "mine", "--results", results, "--plot", tmp_path / "q.svg")
    assert none.code == 4 and "| Biology " in none.out and not (tmp_path / "q.svg").exists()
    assert "both systems need per-query values (<Dataset>.per_query.jsonl" in none.err
