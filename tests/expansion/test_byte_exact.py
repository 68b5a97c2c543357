"""A published expansion's text reaches BM25 and the dense encoder byte for byte, as the official code composed it.

The official evaluation (``src/eval_bench_BM25.py``, ``src/eval_bench.py``, ``load_retrieval_data``) uses ``hy_doc``
exactly as stored for a plain model: BM25 query2doc ``e["text"]*2 + " " + e["hy_doc"]``, dense query2doc
``e["text"] + "[SEP]" + e["hy_doc"]``, dense hyde the pair ``[e["text"], e["hy_doc"]]``. The default answer
policy must not strip the whitespace around it (a byte-level or SentencePiece tokenizer sees it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA
from r2med.datasets import load_dir
from r2med.expansion.apply import bm25_queries, prepare_queries
from r2med.expansion.published import EXPANSION_FILE, load_expansions
from r2med.llm.reasoning import POLICIES
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.retriever import DenseRetriever

# the file's own query texts (the official code read the query from there), with whitespace of their own
ROWS = [
    {"id": "q1", "text": "what lowers a fever", "hy_doc": "\n\nAspirin lowers a fever.\n"},
    {"id": "q2", "text": "how is blood sugar controlled ", "hy_doc": "  Insulin and glucagon.  "},
    {"id": "q3", "text": "an unjudged query", "hy_doc": "\tNo trailing change"},
]


class RecordingEncoder:
    """Remembers every text it is asked to embed (with the instruction as given)."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def encode(self, texts, *, kind, instruction="", batch_size=None, progress=False):
        self.seen += [(kind, instruction, t) for t in texts]
        vectors = [np.random.default_rng(len(t) + 7 * i).standard_normal(8) for i, t in enumerate(texts)]
        return np.stack(vectors).astype(np.float32) if texts else np.zeros((0, 8), np.float32)

    def cache_key(self, kind):
        return {"model": "recording"}


@pytest.fixture
def tiny(tmp_path) -> Path:
    folder = tmp_path / "tiny"
    shutil.copytree(DATA / "tiny", folder)
    for method in ("query2doc", "hyde"):
        path = folder / method / "gpt4" / EXPANSION_FILE
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return folder


def _prepared(folder: Path, method: str, policy: str = "fallback"):
    dataset = load_dir(folder, "tiny")
    return dataset, prepare_queries(dataset, load_expansions(dataset, method, "gpt4"), policy=policy)


@pytest.mark.parametrize("policy", [p for p in POLICIES])
def test_plain_expansions_are_kept_byte_exact_under_every_policy(tiny, policy):
    _, prepared = _prepared(tiny, "hyde", policy)
    assert prepared.expansions == {r["id"]: r["hy_doc"] for r in ROWS}
    assert prepared.queries == {r["id"]: r["text"] for r in ROWS}
    assert prepared.fell_back == []


def test_bm25_query2doc_text_is_the_official_concatenation(tiny):
    _, prepared = _prepared(tiny, "query2doc")
    assert bm25_queries(prepared) == {r["id"]: r["text"] * 2 + " " + r["hy_doc"] for r in ROWS}
    assert bm25_queries(prepared)["q1"] == "what lowers a feverwhat lowers a fever \n\nAspirin lowers a fever.\n"


def _dense(tmp_path: Path, encoder: RecordingEncoder) -> DenseRetriever:
    return DenseRetriever(name="rec", encoder=encoder, instructions=lambda name: ("Q: ", "D: "),
                          cache=EmbeddingCache(tmp_path / "emb"), progress=False)


def test_dense_query2doc_embeds_the_official_sep_text(tiny, tmp_path):
    dataset, prepared = _prepared(tiny, "query2doc")
    encoder = RecordingEncoder()
    _dense(tmp_path, encoder).retrieve_expanded(dataset, prepared, top_k=2)
    queries = [(instruction, text) for kind, instruction, text in encoder.seen if kind == "query"]
    assert queries == [("Q: ", r["text"] + "[SEP]" + r["hy_doc"]) for r in ROWS]
    assert queries[0][1] == "what lowers a fever[SEP]\n\nAspirin lowers a fever.\n"


def test_dense_hyde_embeds_the_query_and_the_untouched_expansion(tiny, tmp_path):
    dataset, prepared = _prepared(tiny, "hyde")
    encoder = RecordingEncoder()
    _dense(tmp_path, encoder).retrieve_expanded(dataset, prepared, top_k=2)
    queries = [(kind, instruction, text) for kind, instruction, text in encoder.seen if kind != "document"]
    assert sorted(queries) == sorted([("query", "Q: ", r["text"]) for r in ROWS]
                                     + [("query", "", r["hy_doc"]) for r in ROWS])


def test_a_blank_plain_expansion_still_falls_back_to_the_query(tiny):
    path = tiny / "hyde" / "gpt4" / EXPANSION_FILE
    rows = [dict(r, hy_doc=" \n ") if r["id"] == "q2" else r for r in ROWS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _, prepared = _prepared(tiny, "hyde")
    assert prepared.expansions["q2"] == ROWS[1]["text"] and prepared.fell_back == ["q2"]
    assert prepared.expansions["q1"] == ROWS[0]["hy_doc"]
