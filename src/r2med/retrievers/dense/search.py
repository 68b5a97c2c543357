"""Exact nearest-neighbour search by inner product, chunk by chunk over the corpus.

The full query x corpus score matrix is never built: each corpus chunk's scores are reduced to
its best candidates and merged into a running top k. Ties are broken by corpus position (earlier
first), the same whatever the chunk size.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def top_k_rows(scores: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` best ``(positions, scores)`` by score descending, then position ascending.

    ``scores`` is ``(n, m)``; ``positions`` is ``(m,)`` shared by all rows or ``(n, m)``.
    Every candidate tied with the k-th score is considered, so the result does not depend on how
    ``np.argpartition`` happens to split ties.

    >>> s = np.array([[0.5, 0.9, 0.5, 0.1]], dtype=np.float32)
    >>> top_k_rows(s, np.array([10, 11, 12, 13]), 2)
    (array([[11, 10]]), array([[0.9, 0.5]], dtype=float32))
    """
    n, m = scores.shape
    pos = np.broadcast_to(positions, (n, m))
    if k >= m:
        order = np.lexsort((pos, -scores), axis=1)
        return np.take_along_axis(pos, order, 1), np.take_along_axis(scores, order, 1)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    top_scores = np.take_along_axis(scores, part, 1)
    kth = top_scores.min(axis=1, keepdims=True)
    top_pos = np.take_along_axis(pos, part, 1)
    order = np.lexsort((top_pos, -top_scores), axis=1)
    out_pos = np.take_along_axis(top_pos, order, 1)
    out_scores = np.take_along_axis(top_scores, order, 1)
    # rows where more candidates than slots tie with the k-th score: pick them by position
    for row in np.flatnonzero((scores >= kth).sum(axis=1) > k):
        cand = np.flatnonzero(scores[row] >= kth[row, 0])
        best = np.lexsort((pos[row, cand], -scores[row, cand]))[:k]
        out_pos[row] = pos[row, cand[best]]
        out_scores[row] = scores[row, cand[best]]
    return out_pos, out_scores


def exact_search(
    queries: np.ndarray,
    corpus_chunks: Iterable[tuple[int, np.ndarray]],
    k: int,
    *,
    query_block: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` corpus rows per query by inner product (cosine when both sides are normalised).

    ``corpus_chunks`` yields ``(offset, array)`` blocks in corpus order (memory-mapped arrays are
    fine; fp16 blocks are computed in float32). Returns ``(positions, scores)``, each
    ``(n_queries, min(k, corpus size))``.

    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> d = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> pos, sc = exact_search(q, [(0, d[:2]), (2, d[2:])], k=2)
    >>> pos.tolist(), sc.tolist()
    ([[1, 0], [2, 0]], [[1.0, 0.6000000238418579], [1.0, 0.800000011920929]])
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n = len(queries)
    best_pos = np.empty((n, 0), dtype=np.int64)
    best_scores = np.empty((n, 0), dtype=np.float32)
    for offset, block in corpus_chunks:
        block = np.asarray(block, dtype=np.float32)
        if len(block) == 0:
            continue
        positions = np.arange(offset, offset + len(block), dtype=np.int64)
        chunk_pos, chunk_scores = [], []
        for start in range(0, n, query_block):
            scores = queries[start : start + query_block] @ block.T
            p, s = top_k_rows(scores, positions, k)
            chunk_pos.append(p)
            chunk_scores.append(s)
        merged_pos = np.concatenate([best_pos, np.concatenate(chunk_pos)], axis=1)
        merged_scores = np.concatenate([best_scores, np.concatenate(chunk_scores)], axis=1)
        best_pos, best_scores = top_k_rows(merged_scores, merged_pos, k)
    return best_pos, best_scores
