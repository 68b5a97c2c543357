"""Analysing and counting a corpus gives exactly the vocabulary and counts of one pass over its token lists: with
BM25's C kernel (one process, lookups on a thread) and with NumPy (forked workers, or one process)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import shared_path
from r2med.retrievers.bm25 import kernel, parallel
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.chunks import NativeChunkTable
from r2med.retrievers.bm25.vocabulary import count_matrix


@pytest.fixture(params=["native", "numpy"])
def engine(request, monkeypatch):
    """BM25's C kernel, or NumPy's path (the kernel hidden, as where it was not built)."""
    if request.param == "numpy":
        monkeypatch.setattr(kernel, "native", None)
    elif kernel.native is None:  # not built here: test_bm25_sparse's check of the build says so once
        pytest.skip("BM25's C kernel was not built")
    return request.param


def test_parallel_counts_equal_serial_counts(engine, monkeypatch):
    texts = [json.loads(line)["text"] for line in shared_path("data", "scifact", "corpus.jsonl").read_text().splitlines()]
    vocab, counts = count_matrix(EnglishAnalyzer().analyze_many(texts))
    monkeypatch.setattr(parallel, "MIN_PARALLEL_TEXTS", 1)
    monkeypatch.setattr(parallel, "_SLICE", 700)  # several slices per worker, new terms in every slice
    seen = []
    analyzer = EnglishAnalyzer()
    assert isinstance(analyzer.chunk_table, NativeChunkTable) == (engine == "native")
    p_vocab, p_counts = parallel.analyze_and_count(texts, analyzer, workers=2, on_progress=seen.append)
    assert p_vocab == vocab
    assert (p_counts.indptr == counts.indptr).all()
    assert (p_counts.indices == counts.indices).all()
    assert np.array_equal(p_counts.data, counts.data)
    assert sum(seen) == len(texts) == 5183
    if engine == "numpy":  # the first two slices analysed as one before forking, then a slice at a time
        assert seen[0] == 1400 and set(seen[1:-1]) == {700}
        assert len(seen) == 1 + -(-(5183 - 1400) // 700)
    else:  # one process: each slice as it is looked up and analysed, the slices growing (700, 1400, 2800, rest)
        assert seen == [700, 1400, 2800, 5183 - 4900]
    # and in one process through the same slicing
    s_vocab, s_counts = parallel.analyze_and_count(texts, EnglishAnalyzer(), workers=1)
    assert s_vocab == vocab
    assert [a.tolist() for a in (s_counts.indptr, s_counts.indices, s_counts.data)] == [
        a.tolist() for a in (counts.indptr, counts.indices, counts.data)]


def test_merged_slices_equal_one_pass_on_hand_made_slices():
    from r2med.retrievers.bm25.vocabulary import merge_slice_counts, provisional_ids, slice_counts

    docs = [["b", "a", "b"], [], ["c", "a"], ["e", "d", "a"], ["d"], ["f", "b", "g", "f"]]
    vocab, counts = count_matrix(docs)
    # gensim order: doc 0 brings a, b (sorted); doc 2 brings c; doc 3 brings d, e; doc 5 brings f, g
    assert vocab == ["a", "b", "c", "d", "e", "f", "g"]
    for cut in ([2, 4], [1], [3, 5], [1, 2, 3, 4, 5]):
        bounds = list(zip([0, *cut], [*cut, len(docs)]))
        parts = [slice_counts(*provisional_ids(docs[a:b])) for a, b in bounds]
        m_vocab, m_counts = merge_slice_counts(parts)
        assert m_vocab == vocab
        assert m_counts.indptr.tolist() == counts.indptr.tolist()
        assert m_counts.indices.tolist() == counts.indices.tolist()
        assert m_counts.data.tolist() == counts.data.tolist()
    empty_vocab, empty = merge_slice_counts([])
    assert empty_vocab == [] and empty.shape == (0, 0)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_garbage_collector_is_paused_and_resumed_as_it_was(workers, engine, monkeypatch):
    """Paused during the analysis, enabled again after it (also when it fails); left off when it was off."""
    import gc

    from r2med.retrievers.bm25 import parallel

    seen = []
    real = parallel._analyze_and_count

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel, "_analyze_and_count", spy)
    monkeypatch.setattr(parallel, "MIN_PARALLEL_TEXTS", 1)
    monkeypatch.setattr(parallel, "_SLICE", 1)  # with 2 workers: one text primed here, the next by a forked worker
    texts = ["Dogs bark", "A dog", "Cats purr"]
    assert gc.isenabled()
    parallel.analyze_and_count(texts, EnglishAnalyzer(), workers=workers)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(TypeError):
        parallel.analyze_and_count(["ok", 3, "fine"], EnglishAnalyzer(), workers=workers)
    assert gc.isenabled()
    gc.disable()
    try:
        parallel.analyze_and_count(texts, EnglishAnalyzer(), workers=workers)
        assert not gc.isenabled()
    finally:
        gc.enable()
