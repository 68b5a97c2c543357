"""DenseRetriever with a deterministic fake encoder: cosine ranking, identical ids, cache reuse."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import DATA
from fake_encoder import FakeEncoder
from r2med.datasets import load_dir
from r2med.datasets.model import Dataset
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.retriever import DenseRetriever
from r2med.types import Qrels


def make(tmp_path, encoder, **kw):
    return DenseRetriever(name="fake", encoder=encoder, instructions=lambda name: ("Q: ", "D: "),
                          cache=EmbeddingCache(tmp_path / "emb"), progress=False, **kw)


def test_ranks_by_cosine_and_reuses_embeddings(tmp_path):
    ds = load_dir(DATA / "tiny")
    enc = FakeEncoder()
    run = make(tmp_path, enc).retrieve(ds, top_k=3)
    docs = np.stack([enc.vector("document|D: " + t) for t in ds.corpus.values()])
    for qid, text in ds.queries.items():
        q = enc.vector("query|Q: " + text)
        expected = [list(ds.corpus)[i] for i in np.argsort(-(docs @ q), kind="stable")[:3]]
        assert list(run[qid]) == expected
        assert list(run[qid].values()) == pytest.approx(sorted((docs @ q).tolist(), reverse=True)[:3], abs=1e-6)
    calls = enc.calls
    assert make(tmp_path, enc).retrieve(ds, top_k=3) == run
    assert enc.calls == calls  # nothing encoded the second time


def test_identical_ids_are_dropped_and_k_kept(tmp_path):
    # query "a" has the same text as document "a": it would rank first
    ds = Dataset(name="x", doc_ids=["a", "b", "c"], doc_texts=["same", "other", "third"],
                 queries={"a": "same"}, qrels=Qrels({"a": {"b": 1}}))
    enc = FakeEncoder()
    enc.vector = lambda text: np.array([1.0, 0.0]) if text.endswith("same") else np.array([0.6, 0.8]) if text.endswith("other") else np.array([0.0, 1.0])
    tmp = tmp_path
    kept = DenseRetriever(name="f", encoder=enc, instructions=lambda n: ("", ""), cache=EmbeddingCache(tmp / "1"),
                          progress=False, ignore_identical_ids=False).retrieve(ds, top_k=2)
    assert list(kept["a"]) == ["a", "b"]
    dropped = DenseRetriever(name="f", encoder=enc, instructions=lambda n: ("", ""), cache=EmbeddingCache(tmp / "2"),
                             progress=False).retrieve(ds, top_k=2)
    assert list(dropped["a"]) == ["b", "c"]
    assert dropped["a"]["b"] == pytest.approx(0.6)
