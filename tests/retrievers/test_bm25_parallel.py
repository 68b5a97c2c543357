"""Analysing and counting on several processes gives exactly the single-process vocabulary and counts."""

from __future__ import annotations

import json

import numpy as np

from conftest import shared_path
from r2med.retrievers.bm25 import parallel
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.vocabulary import count_matrix


def test_parallel_counts_equal_serial_counts(monkeypatch):
    texts = [json.loads(line)["text"] for line in shared_path("data", "scifact", "corpus.jsonl").read_text().splitlines()]
    vocab, counts = count_matrix(EnglishAnalyzer().analyze_many(texts))
    monkeypatch.setattr(parallel, "MIN_PARALLEL_TEXTS", 1)
    monkeypatch.setattr(parallel, "_SLICE", 700)  # several slices per worker, new terms in every slice
    seen = []
    p_vocab, p_counts = parallel.analyze_and_count(texts, EnglishAnalyzer(), workers=2, on_progress=seen.append)
    assert p_vocab == vocab
    assert (p_counts.indptr == counts.indptr).all()
    assert (p_counts.indices == counts.indices).all()
    assert np.array_equal(p_counts.data, counts.data)
    assert sum(seen) == len(texts) and len(seen) == -(-len(texts) // 700)
    # and in one process through the same slicing
    s_vocab, s_counts = parallel.analyze_and_count(texts, EnglishAnalyzer(), workers=1)
    assert s_vocab == vocab and (s_counts != counts).nnz == 0
