"""leaderboard, compare and report on collections other than R2MED's eight, named as they are.

The results are made by ``r2med run`` (BM25, the official variant and Lucene's) on ``../shared/data/scifact`` and
``../shared/data/nfcorpus``. Reference: SciFact's README gives nDCG@10 0.67075 for the official BM25 pipeline and
0.67891 for Lucene's BM25 on exactly these files.
"""

from __future__ import annotations

import json
import logging
import shutil
from decimal import ROUND_HALF_UP, Decimal

import pytest
from reporting_helpers import run, write_official_tree

from conftest import SHARED
from r2med.cli import main
from r2med.reporting.tables import pct

SCIFACT = {"bm25": 0.67075, "bm25-lucene": 0.67891}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    data = SHARED / "data"
    if not (data / "scifact").is_dir() or not (data / "nfcorpus").is_dir():
        pytest.skip(f"{data}/scifact and nfcorpus not available")
    root = tmp_path_factory.mktemp("collections")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("R2MED_HOME", str(root / "home"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        for extra in ([], ["--bm25-variant", "lucene"]):
            code = main(["run", "--data-dir", str(data), "--tasks", "scifact,nfcorpus", "--output", str(root / "res"),
                         "-q", *extra])
            assert code == 0
    return root / "res"


def _value(out, system, dataset):
    record = json.loads((out / "base retriever" / system / f"{dataset}.json").read_text())
    return record["test"]["ndcg_at_10"]


def _half_up(*values):
    mean = sum(Decimal(repr(v)) for v in values) / len(values)
    return str((mean * 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def test_leaderboard_columns_are_the_collections_held(out):
    assert _value(out, "bm25", "scifact") == SCIFACT["bm25"] and _value(out, "bm25-lucene", "scifact") == SCIFACT["bm25-lucene"]
    result = run("leaderboard", out)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    assert header[5:9] == ["nfcorpus", "scifact", "Avg (2 datasets)", "coverage"]  # alphabetical: not R2MED's
    for system, scifact in SCIFACT.items():
        nf = _value(out, system, "nfcorpus")
        cells = [c.strip() for c in next(x for x in lines if f"| base retriever/{system} " in x).split("|")]
        assert cells[5:9] == [pct(nf), pct(scifact), _half_up(nf, scifact), "2/2"]
    assert "Avg (2 datasets): mean over the 2 datasets shown (nfcorpus, scifact)" in result.out
    data = run("leaderboard", out, "--format", "json").json()
    assert data["datasets"] == data["average_over"] == ["nfcorpus", "scifact"]
    bm25 = next(r for r in data["rows"] if r["system"] == "base retriever/bm25")
    assert bm25["values"]["scifact"] == 0.67075 and bm25["coverage"] == 2


def test_leaderboard_dataset_selection(out):
    one = run("leaderboard", out, "--datasets", "scifact", "--format", "csv")
    assert one.code == 0, one.err
    table = [line.split(",") for line in one.out.splitlines() if line]
    assert table[0] == ["rank", "system", "path", "source", "scifact", "average", "coverage"]
    assert [row[4:] for row in table[1:]] == [["67.89", "67.89", "1/1"], ["67.08", "67.08", "1/1"]]
    assert "| Avg (1 dataset) |" in run("leaderboard", out, "--tasks", "SciFact").out  # any case
    typo = run("leaderboard", out, "--datasets", "scifakt")
    assert typo.code == 2 and "no result holds a dataset 'scifakt'; did you mean 'scifact'?" in typo.err
    assert "Datasets in these results: nfcorpus, scifact" in typo.err
    # an R2MED dataset no result holds: its column is empty, nothing to show -> exit 4 naming what is held
    none = run("leaderboard", out, "--datasets", "Biology")
    assert none.code == 4 and "no result has ndcg_at_10 on Biology; the results hold: nfcorpus, scifact" in none.err


def test_with_paper_on_other_collections_leaves_the_paper_out(out, caplog):
    with caplog.at_level(logging.WARNING):
        result = run("leaderboard", out, "--with-paper", "--format", "json")
    assert result.code == 0, result.err
    assert [r["published"] for r in result.json()["rows"]] == [False, False]
    assert any("the paper has no results on nfcorpus, scifact" in r.getMessage() for r in caplog.records)


def test_breakdowns_need_r2med_datasets_or_body_systems(out):
    task = run("leaderboard", out, "--by", "task")
    assert task.code == 4 and "none of the datasets shown (nfcorpus, scifact) is one of R2MED's" in task.err
    body = run("leaderboard", out, "--by", "body-system", "--data-dir", SHARED / "data")
    assert body.code == 4 and "no query of the datasets shown carries a body system" in body.err
    assert f"scifact: no query in {SHARED / 'data' / 'scifact'} has a 'body_system'" in body.err
    nodir = run("leaderboard", out, "--by", "body-system")
    assert nodir.code == 4 and "scifact is not an R2MED dataset, so it is not in the hub cache; pass --data-dir" in nodir.err


def test_compare_named_as_they_are(out):
    result = run("compare", "bm25", "bm25-lucene", "--results", out / "base retriever", "--n-resamples", 200,
                 "--format", "json")
    assert result.code == 0, result.err
    rows = {r["dataset"]: r for r in result.json()["datasets"]}
    assert list(rows) == ["nfcorpus", "scifact"]
    assert rows["scifact"]["test"]["n"] == 300 and rows["nfcorpus"]["test"]["n"] == 323
    assert rows["scifact"]["mean_a"] == pytest.approx(0.67075, abs=5e-6)
    assert rows["scifact"]["mean_b"] == pytest.approx(0.67891, abs=5e-6)
    only = run("compare", "bm25", "bm25-lucene", "--results", out / "base retriever", "--tasks", "scifact",
               "--n-resamples", 200)
    assert only.code == 0 and "| scifact " in only.out and "nfcorpus" not in only.out


def test_compare_without_a_shared_dataset_names_both_sides(out, tmp_path):
    for dataset in ("scifact", "nfcorpus"):  # one result set each, copied whole (its manifest still matches)
        folder = tmp_path / "base retriever" / f"only-{dataset}"
        folder.mkdir(parents=True)
        for path in (out / "base retriever" / "bm25").glob(f"{dataset}.*"):
            shutil.copy(path, folder / path.name)
    result = run("compare", "only-scifact", "only-nfcorpus", "--results", tmp_path / "base retriever")
    assert result.code == 4
    assert ("only-scifact and only-nfcorpus share no dataset with ndcg_at_10 results: only-scifact has scifact; "
            "only-nfcorpus has nfcorpus") in result.err
    paper = run("compare", out / "base retriever" / "bm25", "paper:base retriever/bm25")
    assert paper.code == 4 and "has nfcorpus, scifact; paper:base retriever/bm25 has Biology, Bioinformatics" in paper.err
    asked = run("compare", "only-scifact", "only-nfcorpus", "--results", tmp_path / "base retriever", "--tasks", "nfcorpus")
    assert asked.code == 4 and "share no dataset with ndcg_at_10 results among nfcorpus" in asked.err


def test_report_on_other_collections(out, tmp_path):
    pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
    pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')
    page = tmp_path / "report.html"
    result = run("report", out, "-o", page, "--data-dir", SHARED / "data", "--n-resamples", 100, "--max-queries", 2)
    assert result.code == 0, result.err
    html = page.read_text(encoding="utf-8")
    assert "<th>nfcorpus</th><th>scifact</th><th>Avg (2 datasets)</th>" in html
    assert f'<td class="num">{pct(SCIFACT["bm25"])}</td>' in html
    assert html.count("<svg") == 2  # the leaderboard's bars and the win/loss plot
    assert "<td>nfcorpus</td>" in html and "<td>scifact</td>" in html and "pooled (2 datasets)" in html
    assert "<h3>nfcorpus</h3>" in html and "<h3>scifact</h3>" in html  # drill-down, with the data's texts
    assert "texts and judgements not shown" not in html and "relevant in the top 10" in html
    assert "by task: not shown: no R2MED dataset shown" in html
    assert "by body system: not shown: no query of the datasets shown carries a body system" in html
    one = tmp_path / "one.html"
    assert run("report", out, "-o", one, "--datasets", "scifact", "--n-resamples", 100, "--max-queries", 1).code == 0
    html = one.read_text(encoding="utf-8")
    assert "<th>scifact</th><th>Avg (1 dataset)</th>" in html and "<h3>nfcorpus</h3>" not in html
    # no --data-dir: the texts and judgements come from the directory the run's manifest recorded (checked by sha256)
    assert "texts and judgements not shown" not in html and "<h3>scifact</h3>" in html
    assert "relevant in the top 10" in html


def test_report_compares_two_systems_on_their_own_datasets_when_a_third_holds_another(out, tmp_path):
    """A and B on scifact, a third system on nfcorpus only: the report compares A and B on scifact."""
    pytest.importorskip("jinja2", reason='the report needs the "report" extra: pip install "r2med[report]"')
    pytest.importorskip("matplotlib", reason='the report needs the "report" extra: pip install "r2med[report]"')
    results = tmp_path / "res"
    for system, datasets in (("bm25", ["scifact"]), ("bm25-lucene", ["scifact"]), ("bm25-third", ["nfcorpus"])):
        source = out / "base retriever" / ("bm25" if system == "bm25-third" else system)
        target = results / "base retriever" / system
        target.mkdir(parents=True)
        for dataset in datasets:
            for path in source.glob(f"{dataset}.*"):
                if not path.name.endswith(".manifest.json"):  # copied results: read as they are
                    shutil.copy(path, target / path.name)
    page = tmp_path / "three.html"
    result = run("report", results, "-o", page, "--a", "base retriever/bm25", "--b", "base retriever/bm25-lucene",
                 "--n-resamples", 100, "--max-queries", 1)
    assert result.code == 0, result.err
    html = page.read_text(encoding="utf-8")
    assert "<th>nfcorpus</th><th>scifact</th><th>Avg (2 datasets)</th>" in html
    assert "<td>scifact</td>" in html and "pooled (1 dataset" in html


def test_official_tree_keeps_its_other_collection_out_unless_asked(tmp_path):
    tree = write_official_tree(tmp_path / "results")  # BEIR_NFCorpus.json (0.99) beside every base retriever
    plain = run("leaderboard", tree, "--format", "json").json()
    assert "BEIR_NFCorpus" not in plain["datasets"] and len(plain["datasets"]) == 8
    beir = run("leaderboard", tree, "--datasets", "BEIR_NFCorpus", "--format", "json").json()
    assert beir["datasets"] == ["BEIR_NFCorpus"] and len(beir["rows"]) == 15
    assert all(r["system"].startswith("base retriever/") and r["average"] == 0.99 for r in beir["rows"])
    everything = run("leaderboard", tree, "--datasets", "all", "--format", "json").json()
    assert everything["datasets"][-1] == "BEIR_NFCorpus" and len(everything["datasets"]) == 9
    assert sum(r["coverage"] == 9 for r in everything["rows"]) == 15
