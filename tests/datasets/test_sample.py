"""The SciFact sample r2med ships (``r2med datasets sample``): what it holds, how it is copied, its first run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from r2med.datasets.sample import SAMPLE_FILES, SAMPLE_NAME, copy_sample, sample_files

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def _rows(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def test_shipped_files_are_what_the_builder_makes_from_scifact():
    if not SCIFACT.is_dir():
        pytest.skip("../shared/data/scifact is not beside the checkout")
    spec = importlib.util.spec_from_file_location("make_sample", ROOT / "tools" / "make_sample.py")
    make_sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sample)
    built = make_sample.build(SCIFACT)
    shipped = sample_files()
    assert {name: text.encode("utf-8") for name, text in built.items()} == {n: shipped[n] for n in built}


def test_every_judgement_resolves_and_the_licence_is_stated():
    files = sample_files()
    corpus, queries, qrels = (_rows(files[n]) for n in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"))
    assert (len(queries), len(corpus), len(qrels)) == (50, 574, 60)
    doc_ids, query_ids = {d["id"] for d in corpus}, {q["id"] for q in queries}
    assert {r["p_id"] for r in qrels} <= doc_ids and {r["q_id"] for r in qrels} == query_ids
    readme = files["README.md"].decode("utf-8")
    assert "CC BY-NC 2.0" in readme and "Fact or Fiction: Verifying Scientific Claims" in readme


def test_copy_is_idempotent_and_never_overwrites_other_files(tmp_path):
    from r2med.errors import InvalidInputError

    target = copy_sample(tmp_path / "data")
    assert target == tmp_path / "data" / SAMPLE_NAME
    assert sorted(p.name for p in target.iterdir()) == sorted(SAMPLE_FILES)
    assert copy_sample(tmp_path / "data") == target  # again: same files, nothing to do
    (target / "qrels.jsonl").write_text("mine\n")
    with pytest.raises(InvalidInputError, match=r"qrels.jsonl: already exists and is not r2med's scifact-sample file"):
        copy_sample(tmp_path / "data")
    assert (target / "qrels.jsonl").read_text() == "mine\n"


def test_copy_into_a_file_is_a_usage_error(tmp_path, cli):
    (tmp_path / "f").write_text("x")
    result = cli("datasets", "sample", tmp_path / "f")
    assert result.code == 2 and "not a directory" in result.err


def test_first_offline_run_prints_a_real_table(tmp_path, cli, monkeypatch):
    """The quick start's offline pair: copy the sample, then BM25 on it (nDCG@10 0.79658 -> 79.66)."""
    monkeypatch.chdir(tmp_path)
    copied = cli("datasets", "sample", "r2med-sample")
    assert copied.code == 0
    assert copied.out.startswith("r2med-sample/scifact-sample: SciFact sample, 50 queries, 574 documents, 60 judgements")
    result = cli("run", "--data-dir", "r2med-sample", "--output", "res", "-q")
    assert result.code == 0, result.err
    assert "| scifact-sample |   79.66 | 98.00 |" in result.out
    stored = json.loads((tmp_path / "res" / "base retriever" / "bm25" / "scifact-sample.json").read_text())
    assert stored["test"]["ndcg_at_10"] == 0.79658 and stored["test"]["recall_at_100"] == 0.98
