"""DenseRetriever with a deterministic fake encoder: cosine ranking, identical ids, cache reuse."""

from __future__ import annotations

import numpy as np
import pytest
from fake_encoder import FakeEncoder

from conftest import DATA
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


def test_gar_composition_as_the_official_code(tmp_path):
    ds = load_dir(DATA / "tiny")
    enc = FakeEncoder()
    retriever = make(tmp_path, enc)
    expansions = {"q1": "aspirin lowers fever", "q2": "insulin controls glucose"}
    run = retriever.search_expanded(ds, expansions, method="hyde", top_k=4)
    docs = np.stack([enc.vector("document|D: " + t) for t in ds.corpus.values()])
    for qid in ("q1", "q2"):
        mean = (enc.vector("query|Q: " + ds.queries[qid]) + enc.vector("query|" + expansions[qid])) / 2
        cos = docs @ (mean / np.linalg.norm(mean))
        assert list(run[qid]) == [list(ds.corpus)[i] for i in np.argsort(-cos, kind="stable")]
        assert list(run[qid].values()) == pytest.approx(sorted(cos.tolist(), reverse=True), abs=1e-6)
    # q3 has no expansion: its plain query embedding is used
    assert run["q3"] == retriever.retrieve(ds, top_k=4)["q3"]
    q2d = retriever.search_expanded(ds, expansions, method="query2doc", top_k=4)
    joined = enc.vector("query|Q: " + ds.queries["q1"] + "[SEP]" + expansions["q1"])
    cos = docs @ joined
    assert list(q2d["q1"]) == [list(ds.corpus)[i] for i in np.argsort(-cos, kind="stable")]


def test_expansion_files_reach_the_dense_retriever_composed_as_the_official_code(tmp_path):
    from pathlib import Path

    from r2med.expansion.apply import prepare_queries
    from r2med.expansion.published import Expansions

    ds = load_dir(DATA / "tiny")
    enc = FakeEncoder()
    retriever = make(tmp_path, enc)
    docs = np.stack([enc.vector("document|D: " + t) for t in ds.corpus.values()])
    hy = {"q1": "<think>hmm</think> aspirin", "q2": "insulin", "q3": "x"}
    texts = {"q1": "fever?", "q2": "sugar?", "q3": "q?"}

    def ranking(vector):
        return [list(ds.corpus)[i] for i in np.argsort(-(docs @ (vector / np.linalg.norm(vector))), kind="stable")]

    # plain query2doc: one text, the file's query + "[SEP]" + expansion, with the query instruction
    plain = prepare_queries(ds, Expansions("query2doc", "gpt4", dict(hy), texts, Path("f"), ""))
    run = retriever.retrieve_expanded(ds, plain, top_k=4)
    assert list(run["q2"]) == ranking(enc.vector("query|Q: sugar?[SEP]insulin"))
    # a reasoning model's query2doc: the answer, averaged with the instructed query (official r1_mode)
    r1 = prepare_queries(ds, Expansions("query2doc", "r1-qwen-32b", dict(hy), texts, Path("f"), ""))
    run = retriever.retrieve_expanded(ds, r1, top_k=4)
    assert list(run["q1"]) == ranking(enc.vector("query|Q: fever?") + enc.vector("query|aspirin"))
    with pytest.raises(Exception, match="applies to BM25 only"):
        retriever.retrieve_expanded(ds, plain, composition="query2doc-spaced")
