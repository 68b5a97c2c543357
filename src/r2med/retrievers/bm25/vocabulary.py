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

from r2med.retrievers.bm25.chunks import NativeChunkTable, Scanned
from r2med.retrievers.bm25.cores import default_workers, in_threads
from r2med.retrievers.bm25.sparse import CsrMatrix

__all__ = [
    "SliceCounts",
    "count_matrix",
    "gensim_term_order",
    "matrix_from_chunks",
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


def count_matrix(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], CsrMatrix]:
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


def merge_slice_counts(parts: Iterable[SliceCounts], *, workers: int | None = None) -> tuple[list[str], CsrMatrix]:
    """Vocabulary (gensim order) and counts of the corpus the consecutive slices ``parts`` make up.

    The same result as ``count_matrix`` over the whole corpus. gensim numbers terms in order of the
    document they first occur in, so the final ids of a slice's terms are known as soon as the slices
    before it are merged: each slice is counted as it arrives (``parts`` may be a generator that yields
    each slice as a worker finishes it), its tokens sorted in their final ids by one NumPy sort of
    ``row * n_terms + id`` keys, 32-bit where they fit (a slice's rows times the terms so far), so no
    sort over the whole corpus is left for the end. ``workers`` is accepted for compatibility.

    >>> parts = [slice_counts(*provisional_ids(p)) for p in ([["b", "a"]], [["c", "b", "d", "b"], []])]
    >>> vocab, counts = merge_slice_counts(parts)
    >>> vocab, counts.toarray().tolist()
    (['a', 'b', 'c', 'd'], [[1, 1, 0, 0], [0, 2, 1, 1], [0, 0, 0, 0]])
    """
    provisional: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    final_of = np.empty(1024, dtype=np.int64)  # provisional id -> final id
    vocabulary: list[str] = []  # term strings by final id
    indices: list[np.ndarray] = []
    values: list[np.ndarray] = []
    row_counts: list[np.ndarray] = []
    n_rows = 0
    for part in parts:
        known = len(provisional)
        remap = np.fromiter(map(provisional.__getitem__, part.terms), dtype=np.int64, count=len(part.terms))
        new = np.flatnonzero(remap >= known)  # the terms new to the corpus, in order of first occurrence
        if len(new):
            new_terms = list(map(part.terms.__getitem__, new.tolist()))
            order = gensim_term_order(new_terms, part.first_row[new])
            final_of = _fit(final_of, len(provisional))
            final_of[remap[new[order]]] = np.arange(len(vocabulary), len(vocabulary) + len(new), dtype=np.int64)
            vocabulary.extend(new_terms[i] for i in order.tolist())
        rows = len(part.lengths)
        columns, counts, per_row = _count_slice(final_of[remap], part.ids, part.lengths, len(vocabulary))
        indices.append(columns)
        values.append(counts)
        row_counts.append(per_row)
        n_rows += rows
    return vocabulary, _stack_rows(indices, values, row_counts, n_rows, len(vocabulary))


def _stack_rows(
    indices: list[np.ndarray], values: list[np.ndarray], row_counts: list[np.ndarray], n_rows: int, n_terms: int
) -> CsrMatrix:
    """The CSR matrix of consecutive slices' rows (their column indices, counts and entries per row)."""
    nnz = sum(len(c) for c in indices)
    dtype = np.int32 if max(n_terms, nnz) < 2**31 else np.int64
    indptr = np.zeros(n_rows + 1, dtype=dtype)
    if row_counts:
        np.cumsum(np.concatenate(row_counts), out=indptr[1:])
    return CsrMatrix(
        np.concatenate(values) if values else np.empty(0, dtype=np.int32),
        np.concatenate(indices).astype(dtype, copy=False) if indices else np.empty(0, dtype=dtype), indptr,
        (n_rows, n_terms),
    )


def matrix_from_chunks(
    table: NativeChunkTable, parts: Sequence[Scanned], terms_by_id: Sequence[str], *, workers: int | None = None
) -> tuple[list[str], CsrMatrix]:
    """Vocabulary (gensim order) and counts of the texts of ``parts``, batches scanned by ``table``
    (``NativeChunkTable.scan_many``); ``terms_by_id`` gives the term of each id the table hands out.

    The same result as ``count_matrix`` over the texts' token lists, without a term id per token: the kernel
    finds each term's first text, Python orders the terms as gensim does, and each batch is counted in its final
    ids on up to ``workers`` threads.
    """
    order, first_text = table.first_terms(parts, len(terms_by_id))
    terms = list(map(terms_by_id.__getitem__, order.tolist()))
    in_gensim_order = gensim_term_order(terms, first_text)
    final = np.full(len(terms_by_id), -1, dtype=np.int64)
    final[order[in_gensim_order]] = np.arange(len(order), dtype=np.int64)
    vocabulary = [terms[i] for i in in_gensim_order.tolist()]
    pieces = _even_pieces(parts, 4 * (workers or default_workers()))
    counted = in_threads(lambda piece: table.count(piece, final, len(vocabulary)), pieces, workers)
    n_rows = sum(len(part.chunks_per_text) // 8 for part in parts)
    return vocabulary, _stack_rows([c[0] for c in counted], [c[1] for c in counted], [c[2] for c in counted], n_rows,
                                   len(vocabulary))


def _even_pieces(parts: Sequence[Scanned], n: int) -> list[Scanned]:
    """``parts`` cut into about ``n`` pieces of consecutive texts with about as many chunks each (views of the
    parts' buffers, not copies), in order: the threads that count them then share the work evenly, whatever the
    sizes of the batches the texts were looked up in."""
    total = sum(len(part.occurrences) for part in parts) // 4
    target = max(1, -(-total // max(1, n)))
    pieces: list[Scanned] = []
    for part in parts:
        per_text = np.frombuffer(part.chunks_per_text, dtype=np.int64)
        ends = np.cumsum(per_text)  # the chunks of texts [0, i]
        occurrences, counts = memoryview(part.occurrences), memoryview(part.chunks_per_text)
        text, chunk = 0, 0
        while text < len(per_text):
            stop = max(text + 1, int(np.searchsorted(ends, chunk + target, side="right")))
            stop = min(stop, len(per_text))
            end = int(ends[stop - 1])
            pieces.append(Scanned(occurrences[4 * chunk:4 * end], counts[8 * text:8 * stop]))
            text, chunk = stop, end
    return pieces


def _count_slice(final: np.ndarray, ids: np.ndarray, lengths: np.ndarray, n_terms: int) -> tuple[np.ndarray, ...]:
    """One slice's (term id, count) entries, row by row with increasing term ids, and the entries of each row.

    ``final`` maps the slice's provisional ids (``ids``, flat; ``lengths`` tokens per row) to final ids below
    ``n_terms``.
    """
    rows = len(lengths)
    n_tokens = len(ids)
    if n_tokens == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32), np.zeros(rows, dtype=np.int64)
    key_dtype = np.int32 if rows * n_terms < 2**31 else np.int64
    keys = final.astype(key_dtype).take(ids)
    keys += np.repeat(np.arange(rows, dtype=key_dtype) * key_dtype(n_terms), lengths)
    keys.sort()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    unique = keys[starts]
    counts = np.diff(np.r_[starts, n_tokens]).astype(np.int32)
    per_row = np.bincount(unique // key_dtype(n_terms), minlength=rows)
    return unique % key_dtype(n_terms), counts, per_row


def _fit(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, grown (at least doubled) to hold ``size`` items."""
    if size <= len(array):
        return array
    grown = np.empty(max(size, 2 * len(array)), dtype=array.dtype)
    grown[:len(array)] = array
    return grown


def matrix_from_ids(terms: list[str], ids: np.ndarray, lengths: np.ndarray) -> tuple[list[str], CsrMatrix]:
    """Reorder provisional ids into gensim's ``Dictionary`` order and build the CSR count matrix (each row's terms
    in increasing id order, each once with its count)."""
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
    columns, values, per_row = _count_slice(np.arange(n_terms, dtype=np.int64), ids, lengths, n_terms)
    indptr = np.zeros(n_docs + 1, dtype=index_dtype)
    np.cumsum(per_row, out=indptr[1:])
    return terms, CsrMatrix(values, columns.astype(index_dtype), indptr, (n_docs, n_terms))


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
