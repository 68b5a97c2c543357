"""From a score per corpus row to a ranked top k: duplicate ids, ties, Anserini's tie adjuster.

Small pure functions; :class:`~r2med.retrievers.bm25.index.BM25Index` composes them.

Duplicate document ids (the same id on several corpus rows) are resolved in one of two ways:

``"official"``
    What R2MED's official code does by accident: it scores every row, then fills
    ``results[qid][doc_id] = score`` over all rows in corpus order. A repeated id
    therefore keeps the *position* of its first occurrence (dict insertion order,
    which decides ties in the stable sort that follows) and the *score* of its
    last occurrence (the last assignment wins).
``"best"``
    Each id is represented by its best-scoring row, which is what Pyserini's
    ``remove_dups=True`` keeps when the top k of a Lucene index is de-duplicated.

Either way only unique ids compete for the top k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DocIdTable",
    "adjust_score_ties",
    "collapse_best",
    "collapse_official",
    "first_last_occurrences",
    "top_k",
]


def first_last_occurrences(doc_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct id, in order of first appearance: its first row, its last row.

    Also returns, for every row, the index of its id in that order.

    >>> first, last, group = first_last_occurrences(["a", "b", "a", "c", "b", "a"])
    >>> first.tolist(), last.tolist(), group.tolist()
    ([0, 1, 3], [5, 4, 3], [0, 1, 0, 2, 1, 0])
    """
    index: dict[str, int] = {}
    group = np.fromiter(
        (index.setdefault(doc_id, len(index)) for doc_id in doc_ids), dtype=np.int64, count=len(doc_ids)
    )
    n_unique = len(index)
    rows = np.arange(len(group), dtype=np.int64)
    first = np.full(n_unique, len(group), dtype=np.int64)
    np.minimum.at(first, group, rows)
    last = np.full(n_unique, -1, dtype=np.int64)
    np.maximum.at(last, group, rows)
    return first, last, group


def collapse_official(scores: np.ndarray, last_rows: np.ndarray) -> np.ndarray:
    """R2MED's dict-overwrite semantics: each distinct id gets the score of its LAST row.

    ``scores`` has one column per corpus row (1-D or 2-D, queries on the first axis).
    The result has one column per distinct id, in order of FIRST appearance, which is
    the order the official code's stable sort falls back on for equal scores.

    Worked example: rows ``["a", "b", "a"]`` scored ``[5.0, 3.0, 1.0]``: ``"a"`` sits at
    position 0 (its first row) with score 1.0 (its last row), so ``"b"`` ranks first.

    >>> first, last, _ = first_last_occurrences(["a", "b", "a"])
    >>> collapse_official(np.array([5.0, 3.0, 1.0]), last).tolist()
    [1.0, 3.0]
    """
    return np.take(scores, last_rows, axis=-1)


def collapse_best(scores: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Each distinct id gets the best score over its rows (Pyserini's ``remove_dups``).

    >>> collapse_best(np.array([5.0, 3.0, 1.0]), np.array([0, 1, 0]), 2).tolist()
    [5.0, 3.0]
    """
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    if len(starts) != n_groups:
        raise ValueError("group must use every id index from 0 to n_groups - 1")
    return np.maximum.reduceat(np.take(scores, order, axis=-1), starts, axis=-1)


def top_k(
    scores: np.ndarray,
    k: int,
    *,
    tie_rank: np.ndarray | None = None,
    positive_only: bool = False,
) -> np.ndarray:
    """Indices of the k best scores, by score descending, ties by ``tie_rank`` ascending.

    Without ``tie_rank`` ties go to the smaller index (a stable sort, as
    ``sorted(..., reverse=True)`` does). Selection is ``np.argpartition``-free of
    boundary effects: every candidate tied with the k-th score is considered, so
    the result equals a full stable sort cut at k. With ``positive_only`` rows
    scoring 0 or less are not returned (Lucene returns matching documents only).

    >>> top_k(np.array([1.0, 3.0, 3.0, 2.0, 3.0]), 2).tolist()
    [1, 2]
    >>> top_k(np.array([1.0, 3.0, 3.0, 2.0, 3.0]), 2, tie_rank=np.array([0, 2, 1, 3, 0])).tolist()
    [4, 2]
    >>> top_k(np.array([0.0, 2.0, 0.0]), 5, positive_only=True).tolist()
    [1]
    """
    scores = np.asarray(scores)
    n = scores.shape[0]
    if tie_rank is None:
        tie_rank = np.arange(n)
    if positive_only:
        cand = np.flatnonzero(scores > 0)
    else:
        cand = None
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.int64)
    sub = scores if cand is None else scores[cand]
    m = sub.shape[0]
    if k < m:
        threshold = np.partition(sub, m - k)[m - k]  # the k-th largest value
        above = np.flatnonzero(sub > threshold)
        equal = np.flatnonzero(sub == threshold)
        need = k - above.shape[0]
        if equal.shape[0] > need:
            ranks = tie_rank[equal] if cand is None else tie_rank[cand[equal]]
            equal = equal[np.argsort(ranks, kind="stable")[:need]]
        picked = np.concatenate([above, equal])
    else:
        picked = np.arange(m)
    if cand is not None:
        picked = cand[picked]
    order = np.lexsort((tie_rank[picked], -scores[picked]))
    return picked[order].astype(np.int64, copy=False)


@dataclass(frozen=True)
class DocIdTable:
    """Precomputed duplicate-id bookkeeping for a corpus.

    ``first_rows[u]``/``last_rows[u]``: first and last row of the u-th distinct id
    (distinct ids in order of first appearance); ``group[row]``: u of a row;
    ``id_rank[u]``: rank of the u-th id in byte order of its UTF-8 string, which is
    how Lucene (Anserini's ``BREAK_SCORE_TIES_BY_DOCID``) breaks score ties.
    """

    first_rows: np.ndarray
    last_rows: np.ndarray
    group: np.ndarray
    id_rank: np.ndarray

    @property
    def n_unique(self) -> int:
        return int(self.first_rows.shape[0])

    @property
    def has_duplicates(self) -> bool:
        return self.n_unique != self.group.shape[0]

    @classmethod
    def from_ids(cls, doc_ids: Sequence[str]) -> DocIdTable:
        """Build the table; ids compare as Python strings (code-point order = UTF-8 byte order).

        >>> t = DocIdTable.from_ids(["9", "10", "9"])
        >>> t.first_rows.tolist(), t.last_rows.tolist(), t.id_rank.tolist(), t.has_duplicates
        ([0, 1], [2, 1], [1, 0], True)
        """
        first, last, group = first_last_occurrences(doc_ids)
        unique = [doc_ids[int(r)] for r in first]
        by_string = sorted(range(len(unique)), key=unique.__getitem__)
        id_rank = np.empty(len(unique), dtype=np.int64)
        id_rank[np.asarray(by_string, dtype=np.int64)] = np.arange(len(unique), dtype=np.int64)
        return cls(first_rows=first, last_rows=last, group=group, id_rank=id_rank)


def adjust_score_ties(scores: np.ndarray) -> np.ndarray:
    """Anserini's ``ScoreTiesAdjusterReranker``, which Pyserini applies to every hit list.

    Scores (float32, already in rank order) are rounded half up to 4 decimals (in
    double, as Anserini 0.22.1's bytecode does); a score within 1e-4 of the previous
    one is then lowered by 1e-6 times its place in the run of ties (float32), so
    trec_eval sorts the run exactly as ranked.

    >>> s = np.array([23.439316, 22.087432, 22.087432, 21.602508], dtype=np.float32)
    >>> [f"{x:.6f}" for x in adjust_score_ties(s).tolist()]
    ['23.439301', '22.087400', '22.087399', '21.602501']
    """
    s = np.asarray(scores, dtype=np.float32)
    # (float) (Math.round((double) x * 10000.0) / 10000.0): Math.round is floor(y + 1/2)
    # computed exactly, i.e. round half up
    scaled = s.astype(np.float64) * 10000.0
    whole = np.floor(scaled)
    whole += (scaled - whole) >= 0.5
    out = (whole / 10000.0).astype(np.float32)
    dup = 0
    eps = np.float32(1e-4)
    step = np.float32(1e-6)
    for i in range(1, out.shape[0]):
        if out[i - 1] - out[i] > eps:
            dup = 0
        else:
            dup += 1
            out[i] = out[i] - step * np.float32(dup)
    return out
