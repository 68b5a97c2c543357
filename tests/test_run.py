"""``r2med run`` end to end with BM25 on SciFact: published figures, result files, index reuse, failures."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import DATA, shared_path


def test_run_bm25_on_scifact_reproduces_the_official_run(cli, tmp_path, isolated_home):
    folder = shared_path("data", "scifact")
    result = cli("run", "--retriever", "bm25", "--data-dir", folder, "--output", tmp_path, "--json")
    assert result.code == 0, result.err
    table = result.json()
    assert table["scifact"]["ndcg_at_10"] == 0.67075
    assert table["scifact"]["recall_at_100"] == 0.93
    assert table["average"]["ndcg_at_10"] == 0.67075
    out = tmp_path / "base retriever" / "bm25"
    record = json.loads((out / "scifact.json").read_text())
    assert record["model_name"] == "bm25" and record["test"]["ndcg_at_10"] == 0.67075
    # the run equals the official one: same documents in the same order, scores within 1e-4; the order is
    # the one trec_eval evaluates both files in (ties by document id descending), which r2med's rank column
    # states (the official file lists some ties the other way round)
    from r2med.store.runs import read_run

    ours = [line.split() for line in (out / "scifact.run").read_text().splitlines()]
    ref = read_run(folder / "official_bm25.run")
    assert [(r[0], r[2], r[3]) for r in ours] == [
        (q, d, str(rank)) for q in ref for rank, (d, _) in enumerate(ref.ranked(q), start=1)]
    assert max(abs(float(a[4]) - ref[a[0]][a[2]]) for a in ours) < 1e-4
    assert len(list((isolated_home / "indexes" / "bm25").iterdir())) == 1


def test_second_run_reuses_the_saved_index(cli, tmp_path, monkeypatch):
    folder = shared_path("data", "scifact")
    first = cli("run", "--data-dir", folder, "--output", tmp_path / "a", "--json")
    assert first.code == 0, first.err
    from r2med.retrievers.bm25 import BM25Index

    def no_build(*a, **k):
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr(BM25Index, "build", no_build)
    # the same counts serve the other variant too
    second = cli("run", "--data-dir", folder, "--output", tmp_path / "b", "--json", "--bm25-variant", "lucene")
    assert second.code == 0, second.err
    assert second.json()["scifact"]["ndcg_at_10"] == 0.67891
    assert second.json()["scifact"]["recall_at_100"] == 0.92533
    assert (tmp_path / "b" / "base retriever" / "bm25-lucene" / "scifact.json").is_file()
    third = cli("run", "--data-dir", folder, "--output", tmp_path / "c", "--json")
    assert third.json() == first.json()


def test_run_text_table(cli, tmp_path):
    result = cli("run", "--data-dir", DATA / "tiny", "--output", tmp_path, "--top-k", "3", "--no-cache")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"bm25 -> {tmp_path / 'base retriever' / 'bm25'}"
    assert lines[1] == "| dataset | nDCG@10 |  R@100 |"
    assert lines[3].startswith("| tiny    |") and lines[4].startswith("| average |")


def test_bad_dataset_keeps_earlier_results_and_exits_5(cli, tmp_path):
    root = tmp_path / "data"
    for name in ("Biology", "Bioinformatics"):
        (root / name).mkdir(parents=True)
        for f in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
            (root / name / f).write_text((DATA / "tiny" / f).read_text())
    (root / "Bioinformatics" / "query.jsonl").write_text('{"id": "q1", "text": "fever"}\n{"id": "q2", "text": \n')
    result = cli("run", "--data-dir", root, "--output", tmp_path / "out", "--no-cache")
    assert result.code == 5
    assert f"{root / 'Bioinformatics' / 'query.jsonl'}:2:" in result.err
    out = tmp_path / "out" / "base retriever" / "bm25"
    assert sorted(p.name for p in out.iterdir()) == [
        "Biology.json", "Biology.manifest.json", "Biology.per_query.jsonl", "Biology.run"
    ]


def test_unknown_retriever_and_bad_options(cli, tmp_path):
    result = cli("run", "--retriever", "bm52", "--data-dir", DATA / "tiny", "--output", tmp_path)
    assert result.code == 2 and "did you mean 'bm25'" in result.err
    assert cli("run", "--data-dir", DATA / "tiny", "--top-k", "0").code == 2
    assert cli("run", "--data-dir", DATA / "tiny", "--b", "1.5").code == 2
    assert not any(tmp_path.iterdir())


def test_offline_run_without_data_exits_4(cli, tmp_path):
    result = cli("run", "--output", tmp_path)
    assert result.code == 4 and "Biology is not in the cache" in result.err
    assert not any(tmp_path.iterdir())


def test_bm25_run_imports_neither_torch_nor_java(tmp_path):
    code = (
        "import sys\n"
        "from r2med.cli import main\n"
        f"rc = main(['-q', 'run', '--data-dir', {str(DATA / 'tiny')!r}, '--output', {str(tmp_path)!r}, '--no-cache', '--json'])\n"
        "print([m for m in ('torch', 'jnius', 'pyserini', 'gensim', 'transformers') if m in sys.modules], rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[] 0"


def test_identical_ids_option(cli, tmp_path):
    # a dataset whose query id "d1" is also a relevant document id
    root = tmp_path / "ds"
    root.mkdir()
    (root / "corpus.jsonl").write_text('{"id": "d1", "text": "fever aspirin"}\n{"id": "d2", "text": "fever"}\n')
    (root / "query.jsonl").write_text('{"id": "d1", "text": "fever aspirin"}\n')
    (root / "qrels.jsonl").write_text('{"q_id": "d1", "p_id": "d1", "score": 1}\n')
    kept = cli("run", "--data-dir", root, "--output", tmp_path / "a", "--json", "--no-cache")
    dropped = cli("run", "--data-dir", root, "--output", tmp_path / "b", "--json", "--no-cache", "--identical-ids", "drop")
    assert kept.json()["ds"]["ndcg_at_10"] == 1.0
    assert dropped.json()["ds"]["ndcg_at_10"] == 0.0


def test_name_names_a_single_retriever(cli, tmp_path):
    """--name is the system's name for one retriever too (two local models in folders of the same name would
    otherwise write into one results folder)."""
    tiny = DATA / "tiny"
    result = cli("run", "--retriever", "bm25", "--name", "my-bm25", "--data-dir", tiny, "--output", tmp_path)
    assert result.code == 0, result.err
    assert (tmp_path / "base retriever" / "my-bm25" / "tiny.json").is_file()
    assert not (tmp_path / "base retriever" / "bm25").exists()
    assert result.out.startswith("my-bm25 -> ")
    bad = cli("run", "--retriever", "bm25", "--name", "../x", "--data-dir", tiny, "--output", tmp_path)
    assert bad.code == 2 and "--name" in bad.err
