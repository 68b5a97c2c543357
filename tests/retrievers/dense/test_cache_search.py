"""Embedding cache (content keys, resume after a kill, reuse) and exact chunked search."""

from __future__ import annotations

import numpy as np
import pytest
from fake_encoder import FakeEncoder

from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.search import exact_search

TEXTS = [f"document number {i} about topic {i % 7}" for i in range(103)]


def test_second_run_encodes_nothing(tmp_path):
    enc = FakeEncoder()
    first = EmbeddingCache(tmp_path, chunk=10).embed(enc, TEXTS, kind="document", instruction="Doc: ")
    assert enc.texts_encoded == 103 and enc.calls == 11
    again = EmbeddingCache(tmp_path, chunk=10)
    second = again.embed(enc, TEXTS, kind="document", instruction="Doc: ")
    assert enc.calls == 11 and again.encoded_texts == 0
    assert np.array_equal(first.array(), second.array())
    assert first.array().shape == (103, 16)
    assert np.array_equal(first.array()[5], enc.vector("document|Doc: " + TEXTS[5]))


def test_key_changes_with_instruction_texts_kind_and_model(tmp_path):
    enc = FakeEncoder()
    cache = EmbeddingCache(tmp_path, chunk=50)
    cache.embed(enc, TEXTS, kind="document", instruction="A")
    cache.embed(enc, TEXTS, kind="document", instruction="B")
    cache.embed(enc, TEXTS, kind="query", instruction="A")
    cache.embed(enc, TEXTS[:-1] + ["changed"], kind="document", instruction="A")
    cache.embed(FakeEncoder(dim=8), TEXTS, kind="document", instruction="A")
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 5
    assert cache.encoded_texts == 5 * 103


def test_killed_run_resumes_with_only_the_rest_and_identical_embeddings(tmp_path):
    reference = EmbeddingCache(tmp_path / "ref", chunk=10).embed(FakeEncoder(), TEXTS, kind="document").array()
    killed = FakeEncoder(fail_after_calls=4)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path / "c", chunk=10).embed(killed, TEXTS, kind="document")
    assert killed.texts_encoded == 40
    leftovers = [p.name for p in (tmp_path / "c").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    resumed = FakeEncoder()
    cache = EmbeddingCache(tmp_path / "c", chunk=10)
    stored = cache.embed(resumed, TEXTS, kind="document")
    assert resumed.texts_encoded == 63 and cache.encoded_texts == 63
    assert np.array_equal(stored.array(), reference)


def test_float16_storage(tmp_path):
    stored = EmbeddingCache(tmp_path, dtype="float16").embed(FakeEncoder(), TEXTS, kind="document")
    block = next(stored.blocks())[1]
    assert block.dtype == np.float16
    assert np.allclose(stored.array(), EmbeddingCache(tmp_path / "f32").embed(FakeEncoder(), TEXTS, kind="document").array(), atol=1e-3)


def brute_force(q, d, k):
    scores = q @ d.T
    pos = np.broadcast_to(np.arange(len(d)), scores.shape)
    order = np.lexsort((pos, -scores), axis=1)[:, :k]
    return order, np.take_along_axis(scores, order, 1)


@pytest.mark.parametrize("k", [1, 3, 10, 60, 200])
@pytest.mark.parametrize("chunk", [1, 7, 64, 200])
def test_exact_search_equals_brute_force_with_ties(k, chunk):
    # small integers: every product is exact in float32 whatever the BLAS blocking, so ties are exact
    rng = np.random.default_rng(7)
    base = rng.integers(-3, 4, size=(20, 6)).astype(np.float32)
    docs = base[rng.integers(0, 20, size=150)]  # many duplicated rows: score ties
    queries = rng.integers(-3, 4, size=(9, 6)).astype(np.float32)
    pos, scores = exact_search(queries, [(o, docs[o:o + chunk]) for o in range(0, len(docs), chunk)], k, query_block=4)
    ref_pos, ref_scores = brute_force(queries, docs, k)
    assert np.array_equal(pos, ref_pos)
    assert np.array_equal(scores, ref_scores)


def test_exact_search_over_memory_mapped_cache(tmp_path):
    stored = EmbeddingCache(tmp_path, chunk=16).embed(FakeEncoder(), TEXTS, kind="document")
    q = np.stack([FakeEncoder().vector("document|" + TEXTS[42])])
    pos, scores = exact_search(q, stored.blocks(), 5)
    assert pos[0, 0] == 42 and scores[0, 0] == pytest.approx(1.0, abs=1e-6)
