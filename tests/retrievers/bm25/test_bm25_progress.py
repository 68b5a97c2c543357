"""Building a BM25 index shows a bar over the documents analysed, moved per slice; a cached index shows none."""

from __future__ import annotations

from progress_helpers import forbid_bars, record_bars
from r2med.datasets.model import Dataset
from r2med.retrievers.bm25 import kernel, parallel
from r2med.retrievers.bm25.retriever import BM25Retriever

DATASET = Dataset(
    name="five", doc_ids=[f"d{i}" for i in range(5)],
    doc_texts=["blood sugar", "insulin controls blood sugar", "fever", "aspirin lowers a fever", "sugar"],
    queries={"q1": "what controls blood sugar"}, qrels={"q1": {"d1": 1}},
)


def test_the_index_bar_moves_per_slice_of_documents(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "_SLICE", 2)
    bars = record_bars(monkeypatch)
    run = BM25Retriever(cache_dir=tmp_path, workers=1).retrieve(DATASET, top_k=2)
    assert run.ranked("q1")[0][0] == "d1"
    [bar] = bars
    # slices of 2 documents, growing with BM25's C kernel (2, then 4 ... up to 8 times 2), steady without it
    updates = [2, 3] if kernel.native is not None else [2, 2, 1]
    assert (bar.desc, bar.unit, bar.total, bar.updates, bar.closed) == ("five: BM25 index", "doc", 5, updates, True)
    BM25Retriever(cache_dir=tmp_path, workers=1).retrieve(DATASET, top_k=2)  # the saved index: nothing to build
    assert len(bars) == 1


def test_progress_off_creates_no_bar(monkeypatch):
    forbid_bars(monkeypatch)
    BM25Retriever(progress=False, workers=1).retrieve(DATASET, top_k=2)
