"""The public leaderboard as package data: ``leaderboard --with-paper`` shows 93 rows (the 71 published folders and
the 22 rows the leaderboard lists with an average only), its averages beside the computed ones, and its known
differences from the results tree (MedCPT 9.02 vs 7.87; three rows 0.01 apart from rounding) as notes."""

from __future__ import annotations

import csv
import io
import json
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources

import pytest
from reporting_helpers import package_results, run

from conftest import shared_path
from r2med.datasets.catalog import dataset_names
from r2med.reporting.official import leaderboard_entries, leaderboard_entry


def _packaged() -> dict:
    return json.loads(resources.files("r2med").joinpath("data/leaderboard.json").read_text(encoding="utf-8"))


def _mean_x100(path: str) -> str:
    """The mean of a published system's 8 nDCG@10 values, exact in decimal, x100, half up (the paper's arithmetic)."""
    values = [next(v for k, v in m.items() if k.lower() in ("ndcg_at_10", "ndcg@10")) for m in package_results()[path].values()]
    assert len(values) == 8
    mean = sum(Decimal(str(v)) for v in values) / 8 * 100
    return str(mean.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def test_package_data_is_the_shared_leaderboard_verbatim():
    shared = json.loads(shared_path("protocol", "leaderboard.json").read_text())
    assert _packaged() == shared and _packaged()["_source"].startswith("The public R2MED leaderboard table (69 rows")


def test_entries_and_their_relation_to_the_results_tree():
    entries = leaderboard_entries()
    assert len(entries) == 69 and [e.rank for e in entries] == list(range(1, 70))
    published = set(package_results())
    on_board = {e.system for e in entries}
    # 47 of the leaderboard's rows are published folders, 22 are not; 24 published folders are not on it
    assert sum(e.published for e in entries) == 47 and all((e.system in published) == e.published for e in entries)
    assert len(published - on_board) == 24
    # where the leaderboard's average differs from the mean of the published numbers, published_average is that mean
    differing = {e.system: (e.average, e.published_average) for e in entries if e.published_average is not None}
    assert differing == {"gar/hyde/gpt4/bm25": (37.7, 37.69), "gar/hyde/huatuo-o1-70b/bm25": (33.43, 33.42),
                         "gar/hyde/qwen-32b/bge": (26.19, 26.18), "base retriever/medcpt": (9.02, 7.87)}
    for system, (_, mean) in differing.items():
        assert _mean_x100(system) == f"{mean:.2f}", system
    # every other published row's listed average is the mean of its published numbers
    for e in entries:
        if e.published and e.published_average is None:
            assert _mean_x100(e.system) == f"{e.average:.2f}", e.system
    assert leaderboard_entry("/reranker/reasonrank-32b/e5/top_100/").name == "E5-mistral-7b-instruct + ReasonRank(32B)"


def test_with_paper_has_93_rows_with_the_leaderboard_beside_the_computed_average():
    result = run("leaderboard", "--with-paper", "--json")
    assert result.code == 0, result.err
    rows = result.json()["rows"]
    assert len(rows) == 93
    by = {r["system"]: r for r in rows}
    only = [r for r in rows if r["source"] == "leaderboard"]
    assert len(only) == 22 and all(r["average_only"] and r["published"] for r in only)
    assert all(v is None for r in only for v in r["values"].values()) and all(r["average"] is None for r in only)
    assert by["base retriever/reason-embed-qwen3-8b"]["name"] == "BGE-Reasoner-Embed-0928"
    assert by["base retriever/reason-embed-qwen3-8b"]["leaderboard_average"] == 0.4318
    assert by["reranker/reasonrank-32b/e5/top_100"]["leaderboard_average"] == 0.4285
    # MedCPT: computed 7.87 from its published numbers, listed 9.02; both shown, with the difference named
    medcpt = by["base retriever/medcpt"]
    assert f"{100 * medcpt['average']:.2f}" == "7.87" and medcpt["leaderboard_average"] == 0.0902
    assert medcpt["leaderboard_note"] == ("the leaderboard lists 9.02, the mean of the published per-dataset numbers "
                                          "is 7.87 (1.15 apart: the leaderboard's number has no per-dataset numbers "
                                          "behind it)")
    gpt4_bm25 = by["gar/hyde/gpt4/bm25"]
    assert gpt4_bm25["leaderboard_average"] == 0.377 and gpt4_bm25["leaderboard_note"].endswith(
        "lists 37.70, the mean of the published per-dataset numbers is 37.69 (0.01 apart: a rounding difference)")
    # a published folder that is not on the leaderboard has no listed average
    assert by["gar/lamer/gpt4/nv"]["leaderboard_average"] is None and not by["gar/lamer/gpt4/nv"]["average_only"]


def test_markdown_shows_dashes_the_listed_average_and_the_notes():
    result = run("leaderboard", "--with-paper")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    header = [c.strip() for c in lines[0].split("|")][1:-1]
    assert header == ["#", "system", "path", "source", *dataset_names(), "Avg", "leaderboard", "coverage"]
    body = [line for line in lines if line.startswith("| ")][1:]
    assert len(body) == 93
    cells = {c[2]: c for c in ([x.strip() for x in line.split("|")][1:-1] for line in body)}
    # rank 1: the leaderboard's first row (43.18), above the best published folder (Query2doc gpt4 + NV, 41.65)
    first = [x.strip() for x in body[0].split("|")][1:-1]
    assert first[:4] == ["1", "BGE-Reasoner-Embed-0928", "base retriever/reason-embed-qwen3-8b", "leaderboard"]
    assert first[4:12] == ["-"] * 8 and first[12:] == ["43.18", "43.18", "0/8"]
    assert cells["base retriever/medcpt"][12:] == ["7.87", "9.02", "8/8"]
    assert cells["gar/hyde/qwen-32b/bge"][12:] == ["26.18", "26.19", "8/8"]
    assert cells["gar/lamer/gpt4/nv"][13] == "-"
    notes = [line for line in lines if line.startswith("Note, ")]
    assert ("Note, 22 rows of source 'leaderboard': R2MED's public leaderboard lists only their average; no "
            "per-dataset numbers are published, so each dataset shows '-' and the average is the leaderboard's") in notes
    assert ("Note, HyDE (huatuo-o1-70b) + BM25 (paper): the leaderboard lists 33.43, the mean of the published "
            "per-dataset numbers is 33.42 (0.01 apart: a rounding difference)") in notes
    assert sum("rounding difference" in n for n in notes) == 3
    assert any(n.startswith("Note, MedCPT (paper):") and "9.02" in n and "7.87" in n for n in notes)


def test_csv_latex_html_carry_the_leaderboard_column():
    table = [r for r in csv.reader(io.StringIO(run("leaderboard", "--with-paper", "--format", "csv").out)) if r]
    assert table[0][-3:] == ["average", "leaderboard_average", "coverage"] and len(table) == 94
    medcpt = next(r for r in table if r[2] == "base retriever/medcpt")
    assert medcpt[-3:] == ["7.87", "9.02", "8/8"]
    reasonrank = next(r for r in table if r[2] == "reranker/reasonrank-32b/e5/top_100")
    assert reasonrank[4:12] == [""] * 8 and reasonrank[-3:] == ["42.85", "42.85", "0/8"]
    pytest.importorskip("jinja2", reason='LaTeX and HTML need the "report" extra: pip install "r2med[report]"')
    latex = run("leaderboard", "--with-paper", "--format", "latex").out
    assert "& Avg & Leaderboard & Cov." in latex and "MedCPT$^\\dagger$ & 2.16" in latex and "& 7.87 & 9.02 & 8/8" in latex
    assert "% Note, 22 rows of source 'leaderboard'" in latex
    html = run("leaderboard", "--with-paper", "--format", "html").out
    assert html.count("<tr class=") == 93 and "<th>leaderboard</th>" in html and "<td class=\"num\">9.02</td>" in html


def test_the_leaderboard_is_left_out_of_tables_over_other_datasets_or_metrics():
    # its averages are nDCG@10 over the eight: a table over Biology alone, or of recall, shows the 71 folders only
    biology = run("leaderboard", "--with-paper", "--datasets", "Biology", "--json").json()
    assert len(biology["rows"]) == 71 and "leaderboard_average" not in biology["rows"][0]
    assert "leaderboard" not in run("leaderboard", "--with-paper", "--datasets", "Biology").out.splitlines()[0]
    recall = run("leaderboard", "--with-paper", "--metric", "recall_at_100", "--json").json()
    assert len(recall["rows"]) == 71
