"""``r2med report`` finds a local dataset's texts and judgements through the directory the run's manifest records
(absolute, beside the files' sha256), from any working directory, and refuses a directory whose files changed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

QUERY_1 = "0-dimensional biomaterials show inductive properties."  # the sample's first query


@pytest.fixture
def sample_run(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("R2MED_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert cli("datasets", "sample", "data").code == 0
    result = cli("run", "--data-dir", "data", "--output", "out", "-q")  # relative paths, as a user types them
    assert result.code == 0, result.err
    return tmp_path


def test_manifest_records_the_absolute_dataset_directory(sample_run):
    manifest = json.loads((sample_run / "out" / "base retriever" / "bm25" / "scifact-sample.manifest.json").read_text())
    assert manifest["dataset"]["directory"] == str(sample_run / "data" / "scifact-sample")
    assert set(manifest["dataset"]["sha256"]) == {"corpus.jsonl", "query.jsonl", "qrels.jsonl"}


def test_report_shows_texts_from_another_directory(cli, sample_run, monkeypatch):
    elsewhere = sample_run / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = cli("report", "../out", "--n-resamples", "10")
    assert result.code == 0, result.err
    page = (elsewhere / "report.html").read_text(encoding="utf-8")
    assert QUERY_1 in page and "\u2713 1" in page and "texts and judgements not shown" not in page


def test_report_refuses_changed_dataset_files(cli, sample_run):
    queries = sample_run / "data" / "scifact-sample" / "query.jsonl"
    queries.write_text(queries.read_text().replace(QUERY_1, "an edited query"))
    result = cli("report", "out", "--n-resamples", "10")
    assert result.code == 0, result.err
    page = (sample_run / "report.html").read_text(encoding="utf-8")
    assert "an edited query" not in page and QUERY_1 not in page
    assert "query.jsonl differ from the sha256 recorded in the manifest" in result.err
    assert "texts and judgements not shown" in page


def test_report_says_when_the_recorded_directory_is_gone(cli, sample_run):
    (sample_run / "data").rename(sample_run / "moved")
    result = cli("report", "out", "--n-resamples", "10")
    assert result.code == 0, result.err
    assert "is gone; pass --data-dir" in result.err
    # --data-dir still wins over the manifest
    result = cli("report", "out", "--n-resamples", "10", "--data-dir", "moved")
    assert result.code == 0 and QUERY_1 in (sample_run / "report.html").read_text(encoding="utf-8")


def test_leaderboard_and_compare_default_to_results(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("R2MED_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    result = cli("leaderboard")
    assert result.code == 4 and "result directory results does not exist" in result.err
    assert cli("report").code == 4
    assert cli("datasets", "sample", "data").code == 0
    assert cli("run", "--data-dir", "data", "-q").code == 0
    assert cli("run", "--data-dir", "data", "--bm25-variant", "lucene", "-q").code == 0
    rows = [line for line in cli("leaderboard").out.splitlines() if "| base retriever/bm25" in line]
    assert len(rows) == 2 and all("79.66" in row or "bm25-lucene" in row for row in rows)
    result = cli("compare", "base retriever/bm25", "base retriever/bm25-lucene", "--n-resamples", "10", "--json")
    assert result.code == 0, result.err
    got = result.json()
    assert (got["a"], got["b"]) == ("base retriever/bm25", "base retriever/bm25-lucene")
    assert [d["dataset"] for d in got["datasets"]] == ["scifact-sample"] and round(got["datasets"][0]["mean_a"], 4) == 0.7966
