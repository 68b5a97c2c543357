"""Token lists to a vocabulary and a document x term count matrix, in one pass over the tokens.

Term ids follow gensim's ``Dictionary`` exactly: documents are read in order and the
terms a document introduces get the next ids in sorted (code-point) order of their
strings. The ids matter beyond bookkeeping: gensim's dot product accumulates in
float32 in increasing term-id order, and reproducing its scores bit for bit needs
the same order.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

__all__ = [
    "SliceCounts",
    "count_matrix",
    "gensim_term_order",
    "matrix_from_ids",
    "merge_provisional",
    "merge_slice_counts",
    "provisional_ids",
    "query_term_counts",
    "slice_counts",
]


def gensim_term_order(tokens_by_first_doc: Sequence[str], first_doc: np.ndarray) -> np.ndarray:
    """Permutation putting terms in gensim ``Dictionary`` id order.

    ``tokens_by_first_doc`` lists the distinct terms in order of first occurrence and
    ``first_doc`` (non-decreasing) is the document each first occurs in. gensim gives
    the terms new to a document consecutive ids in sorted order of their strings.

    >>> gensim_term_order(["b", "a", "d", "c"], np.array([0, 0, 1, 1])).tolist()
    [1, 0, 3, 2]
    """
    n = len(tokens_by_first_doc)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, first_doc[1:] != first_doc[:-1]])
    ends = np.r_[starts[1:], n]
    order: list[int] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        if e - s == 1:
            order.append(s)
        else:
            order.extend(sorted(range(s, e), key=tokens_by_first_doc.__getitem__))
    return np.asarray(order, dtype=np.int64)


def count_matrix(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], sp.csr_matrix]:
    """The vocabulary (term strings by id) and the CSR matrix of term counts, one row per document.

    Rows have their column indices sorted (increasing term id). Empty documents are
    empty rows.

    >>> vocab, counts = count_matrix([["b", "a", "b"], [], ["c", "a"]])
    >>> vocab
    ['a', 'b', 'c']
    >>> counts.toarray().tolist()
    [[1, 2, 0], [0, 0, 0], [1, 0, 1]]
    """
    return matrix_from_ids(*provisional_ids(token_lists))


def provisional_ids(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One dict pass: ``(terms, ids, lengths)`` with term ids in order of first occurrence.

    ``ids`` is the flat id of every token, ``lengths`` the number of tokens per document.

    >>> terms, ids, lengths = provisional_ids([["b", "a", "b"], [], ["c", "a"]])
    >>> terms, ids.tolist(), lengths.tolist()
    (['b', 'a', 'c'], [0, 1, 0, 2, 1], [3, 0, 2])
    """
    n_docs = len(token_lists)
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    provisional: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    ids = np.fromiter(
        map(provisional.__getitem__, itertools.chain.from_iterable(token_lists)),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    return list(provisional), ids, lengths


def merge_provisional(parts: Iterable[tuple[list[str], np.ndarray, np.ndarray]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Join the ``provisional_ids`` of consecutive slices of a corpus, as if computed in one pass.

    Terms keep their order of first occurrence over the whole corpus, because slices come in corpus
    order and each lists its new terms in its own order of first occurrence.

    >>> merged = merge_provisional([provisional_ids([["b", "a"]]), provisional_ids([["c", "b"], []])])
    >>> merged[0], merged[1].tolist(), merged[2].tolist()
    (['b', 'a', 'c'], [0, 1, 2, 0], [2, 2, 0])
    """
    provisional: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    all_ids, all_lengths = [], []
    for terms, ids, lengths in parts:
        remap = np.fromiter(map(provisional.__getitem__, terms), dtype=np.int64, count=len(terms))
        all_ids.append(remap[ids] if len(terms) else ids)
        all_lengths.append(lengths)
    if not all_lengths:
        return [], np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return list(provisional), np.concatenate(all_ids), np.concatenate(all_lengths)


class SliceCounts(NamedTuple):
    """The provisional term ids of one contiguous slice of a corpus, ready to merge (a worker's answer).

    ``terms`` lists the slice's distinct terms in order of first occurrence and ``first_row`` the
    row (within the slice) each first occurs in; ``ids`` is the provisional id (an index into
    ``terms``) of every token, flat and in order, and ``lengths`` the number of tokens of each row.
    The tokens are counted once, after the merge, in their final ids (one sort, not one per slice and
    another after the merge).
    """

    terms: list[str]
    first_row: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray


def slice_counts(terms: list[str], ids: np.ndarray, lengths: np.ndarray) -> SliceCounts:
    """Prepare the ``provisional_ids`` of one slice for :func:`merge_slice_counts` (what a worker hands back).

    >>> part = slice_counts(*provisional_ids([["b", "a", "b"], [], ["c", "a"]]))
    >>> part.terms, part.first_row.tolist(), part.lengths.tolist(), part.ids.tolist()
    (['b', 'a', 'c'], [0, 0, 2], [3, 0, 2], [0, 1, 0, 2, 1])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(terms):
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        running = np.maximum.accumulate(ids)  # provisional id i first occurs where the running max reaches i
        first_pos = np.flatnonzero(np.r_[True, running[1:] > running[:-1]])
        first_row = np.searchsorted(indptr, first_pos, side="right") - 1
    else:
        first_row = np.empty(0, dtype=np.int64)
    dtype = np.int32 if len(terms) < 2**31 else np.int64  # half the bytes to send back from a worker
    return SliceCounts(list(terms), first_row.astype(np.int64), lengths, np.asarray(ids).astype(dtype))


def merge_slice_counts(parts: Iterable[SliceCounts], *, workers: int | None = None) -> tuple[list[str], sp.csr_matrix]:
    """Vocabulary (gensim order) and counts of the corpus the consecutive slices ``parts`` make up.

    The same result as ``count_matrix`` over the whole corpus: the slices' terms are merged in order
    of first occurrence and put in gensim's order, then every token's final id is counted per row.
    ``workers`` is accepted for compatibility; the counting is one NumPy sort.

    >>> parts = [slice_counts(*provisional_ids(p)) for p in ([["b", "a"]], [["c", "b", "d", "b"], []])]
    >>> vocab, counts = merge_slice_counts(parts)
    >>> vocab, counts.toarray().tolist()
    (['a', 'b', 'c', 'd'], [[1, 1, 0, 0], [0, 2, 1, 1], [0, 0, 0, 0]])
    """
    provisional: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    first_rows: list[np.ndarray] = []
    remaps, ids, row_counts = [], [], []
    n_rows = 0
    for part in parts:
        known = len(provisional)
        remap = np.fromiter(map(provisional.__getitem__, part.terms), dtype=np.int64, count=len(part.terms))
        first_rows.append(part.first_row[remap >= known] + n_rows)  # the terms new to the corpus
        remaps.append(remap)
        ids.append(part.ids)
        row_counts.append(part.lengths)
        n_rows += len(part.lengths)
    terms = list(provisional)
    n_terms = len(terms)
    first_row = np.concatenate(first_rows) if first_rows else np.empty(0, dtype=np.int64)
    order = gensim_term_order(terms, first_row)
    final = np.empty(n_terms, dtype=np.int64)
    final[order] = np.arange(n_terms, dtype=np.int64)
    lengths = np.concatenate(row_counts) if row_counts else np.empty(0, dtype=np.int64)
    n_tokens = int(lengths.sum())
    # one key per token: row * n_terms + final id; sorted, equal keys are one (row, term) entry
    key_dtype = np.int32 if n_rows * max(n_terms, 1) < 2**31 else np.int64
    keys = np.empty(n_tokens, dtype=key_dtype)
    at = 0
    for remap, idx in zip(remaps, ids):
        np.take(final[remap].astype(key_dtype), idx, out=keys[at:at + len(idx)])
        at += len(idx)
    keys += np.repeat(np.arange(n_rows, dtype=key_dtype) * key_dtype(n_terms), lengths)
    keys.sort()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if n_tokens else np.empty(0, dtype=np.int64)
    unique = keys[starts]
    values = np.diff(np.r_[starts, n_tokens]).astype(np.int32)
    dtype = np.int32 if max(n_terms, len(unique)) < 2**31 else np.int64
    indices = (unique % n_terms).astype(dtype) if n_terms else unique.astype(dtype)
    indptr = np.zeros(n_rows + 1, dtype=dtype)
    if len(unique):
        np.cumsum(np.bincount(unique // n_terms, minlength=n_rows), out=indptr[1:])
    counts = sp.csr_matrix((values, indices, indptr), shape=(n_rows, n_terms))
    counts.has_sorted_indices = True
    counts.has_canonical_format = True
    return [terms[i] for i in order.tolist()], counts


def matrix_from_ids(terms: list[str], ids: np.ndarray, lengths: np.ndarray) -> tuple[list[str], sp.csr_matrix]:
    """Reorder provisional ids into gensim's ``Dictionary`` order and build the CSR count matrix."""
    n_docs = len(lengths)
    indptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    n_tokens = int(indptr[-1])
    n_terms = len(terms)
    if n_terms:
        # first occurrence of provisional id i is where the running max first reaches i
        running = np.maximum.accumulate(ids)
        first_pos = np.flatnonzero(np.r_[True, running[1:] > running[:-1]])
        first_doc = np.searchsorted(indptr, first_pos, side="right") - 1
        order = gensim_term_order(terms, first_doc)
        remap = np.empty(n_terms, dtype=np.int64)
        remap[order] = np.arange(n_terms, dtype=np.int64)
        ids = remap[ids]
        terms = [terms[i] for i in order.tolist()]
    index_dtype = np.int32 if max(n_terms, n_tokens) < 2**31 else np.int64
    counts = sp.csr_matrix(
        (np.ones(n_tokens, dtype=np.int32), ids.astype(index_dtype), indptr.astype(index_dtype)),
        shape=(n_docs, n_terms),
    )
    counts.sum_duplicates()  # sorts the indices of every row and merges repeats
    return terms, counts


def query_term_counts(
    query_token_lists: Iterable[Sequence[str]], token2id: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bag of words of each query over a fixed vocabulary; unknown tokens are dropped.

    Returns ``(query, term, count, known_length)``: one entry per distinct (query, term)
    pair, sorted by query then term id, and per query the number of its tokens that are
    in the vocabulary (what gensim's ``doc2bow`` keeps).

    >>> q, t, c, n = query_term_counts([["b", "x", "b", "a"], ["x"]], {"a": 0, "b": 1})
    >>> q.tolist(), t.tolist(), c.tolist(), n.tolist()
    ([0, 0], [0, 1], [1, 2], [3, 0])
    """
    get = token2id.get
    per_query = [[i for i in map(get, tokens) if i is not None] for tokens in query_token_lists]
    n_queries = len(per_query)
    known = np.fromiter(map(len, per_query), dtype=np.int64, count=n_queries)
    if n_queries == 0 or known.sum() == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty, known
    term = np.fromiter(itertools.chain.from_iterable(per_query), dtype=np.int64, count=int(known.sum()))
    query = np.repeat(np.arange(n_queries, dtype=np.int64), known)
    n_vocab = max(len(token2id), 1)
    keys, count = np.unique(query * n_vocab + term, return_counts=True)
    return keys // n_vocab, keys % n_vocab, count.astype(np.int64), known
