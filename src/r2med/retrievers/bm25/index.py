"""A BM25 index over analysed documents, with R2MED's official scoring and Lucene's.

>>> docs = [["cat", "sat"], ["dog", "sat", "sat"], ["cat", "dog", "fish"]]
>>> index = BM25Index.build(docs, doc_ids=["1", "9", "10"])
>>> {d: round(s, 6) for d, s in index.search_run(["q"], [["cat", "sat"]])["q"].items()}
{'1': 0.134858, '9': 0.082884, '10': 0.062749}
>>> hits = index.search([["dog"]], k=3)[0]  # a tie: the earlier row first
>>> hits.rows.tolist(), [round(s, 6) for s in hits.scores.tolist()]
([1, 2, 0], [0.067806, 0.067806, 0.0])
>>> lucene = BM25Index.build(docs, doc_ids=["1", "9", "10"], variant="lucene")
>>> lucene.search_run(["q"], [["dog"]])  # the same tie: the smaller id string first
{'q': {'10': 0.24160000681877136, '9': 0.24159900844097137}}

Variants (see :mod:`r2med.retrievers.bm25.scoring` for the formulas):

``"r2med"`` (default)
    R2MED's official BM25: gensim ``LuceneBM25Model`` weights on both sides, dot
    product in float32. Every row counts in N and in the average length, empty ones
    included. Every document is ranked, zero scores included (a query matching fewer
    than k documents is filled up with score-0 documents in corpus order, as the
    official top 100 is). Ties go to the earlier document in the corpus (the
    official code's stable sort). Repeated document ids follow the official dict
    semantics: the score of the last occurrence at the position of the first.
``"lucene"``
    Lucene 9 ``BM25Similarity`` as Pyserini 0.22.1 searches it (bag-of-words query,
    a term repeated n times is boosted n times, lossy one-byte length norms,
    float32). N and the average length count only documents with at least one
    token (Lucene's ``docCount``; Anserini does not even index empty texts). Only
    documents matching at least one query term are returned. Ties go to the smaller
    document id *string* (Anserini sorts by score, then by the id field), so "10"
    before "9"; on scifact 105 of 300 queries need this. A repeated id counts once,
    with its best row (Pyserini's ``remove_dups``). Unlike Lucene there is no limit
    of 1,024 distinct query terms.

Both are bit-exact with their references on scifact, cacm, nfcorpus and an edge-case
collection (``tests/retrievers/bm25/test_bm25_scoring.py``). Not reproduced: gensim's
``Dictionary`` pruning of vocabularies above 2,000,000 terms (a warning is logged).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from r2med.errors import InvalidInputError, UsageError
from r2med.retrievers.bm25 import persist
from r2med.retrievers.bm25 import kernel as kernel_module
from r2med.retrievers.bm25.cores import default_workers, in_threads, row_parts
from r2med.retrievers.bm25.options import K1, K1_MAX, VARIANTS, B
from r2med.retrievers.bm25.ranking import (
    DocIdTable,
    adjust_score_ties,
    collapse_best,
    collapse_official,
    top_k,
)
from r2med.retrievers.bm25.scoring import (
    gensim_idf,
    gensim_length_norm,
    gensim_weights,
    int_to_byte4,
    lucene_idf,
    lucene_norm_inverse,
    lucene_term_scores,
)
from r2med.retrievers.bm25.sparse import CsrMatrix, choose_kernel, load_kernel, product
from r2med.retrievers.bm25.vocabulary import count_matrix, query_term_counts

__all__ = ["VARIANTS", "BM25Index", "BM25Params", "Hits"]

logger = logging.getLogger(__name__)

# bound the dense (queries x documents) and (terms x queries) blocks of one chunk of queries
_MAX_BLOCK_CELLS = 1 << 22
# gensim's Dictionary prunes its vocabulary to this many terms when it grows larger
_GENSIM_PRUNE_AT = 2_000_000


@dataclass(frozen=True)
class BM25Params:
    """How an index scores: the variant and BM25's two parameters.

    >>> BM25Params()
    BM25Params(variant='r2med', k1=0.9, b=0.4)
    >>> BM25Params(variant="lucen")
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: unknown BM25 variant 'lucen'; valid: 'r2med', 'lucene' (did you mean 'lucene'?)
    """

    variant: str = "r2med"
    k1: float = K1
    b: float = B

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            close = difflib.get_close_matches(str(self.variant), VARIANTS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            valid = ", ".join(repr(v) for v in VARIANTS)
            raise UsageError(f"unknown BM25 variant {self.variant!r}; valid: {valid}{hint}")
        if not (isinstance(self.k1, (int, float)) and 0 <= self.k1 <= K1_MAX):
            raise UsageError(f"BM25 k1 must be a number in [0, {K1_MAX:g}] (float32 scores cannot represent a larger "
                             f"one), got {self.k1!r}")
        if not (isinstance(self.b, (int, float)) and 0.0 <= self.b <= 1.0):
            raise UsageError(f"BM25 b must be a number in [0, 1], got {self.b!r}")
        object.__setattr__(self, "k1", float(self.k1))
        object.__setattr__(self, "b", float(self.b))


class Hits(NamedTuple):
    """The ranked hits of one query: corpus row indices and their float32 scores."""

    rows: np.ndarray
    scores: np.ndarray


class BM25Index:
    """Term counts of a corpus plus the weights of one BM25 variant; searches all queries at once.

    Build with :meth:`build`, query with :meth:`search` (row indices and scores) or
    :meth:`search_run` (``{qid: {docid: score}}`` in rank order), persist with
    :meth:`save` / :meth:`load`. Inputs are token lists already analysed (see
    ``r2med.retrievers.bm25.analyzer``); documents are rows in corpus order.
    """

    def __init__(
        self,
        *,
        params: BM25Params,
        vocabulary: list[str],
        counts: CsrMatrix | Any,
        doc_ids: list[str] | None = None,
        workers: int | None = None,
    ) -> None:
        if doc_ids is not None and len(doc_ids) != counts.shape[0]:
            raise InvalidInputError(
                f"{len(doc_ids)} document ids for {counts.shape[0]} documents; give one id per document"
            )
        if counts.shape[1] != len(vocabulary):
            raise InvalidInputError(f"count matrix has {counts.shape[1]} columns for {len(vocabulary)} terms")
        self.params = params
        self.workers = workers  # threads for weighting and search (None: every core)
        self.vocabulary = vocabulary
        self.counts = counts  # as given: a CsrMatrix, or a scipy.sparse CSR matrix
        counts = self._counts = CsrMatrix.from_scipy_like(counts)
        self.doc_ids = doc_ids
        self.token2id: dict[str, int] = dict(zip(vocabulary, range(len(vocabulary))))
        self.doc_lengths = counts.row_sums().astype(np.int64)
        self.doc_freqs = np.bincount(counts.indices, minlength=len(vocabulary)).astype(np.int64)
        self._ids = DocIdTable.from_ids(doc_ids if doc_ids is not None else _row_ids(counts.shape[0]))
        if len(vocabulary) > _GENSIM_PRUNE_AT and params.variant == "r2med":
            logger.warning(
                "vocabulary has %d terms; gensim's Dictionary would have pruned it to %d, "
                "so scores may differ from the official code's",
                len(vocabulary),
                _GENSIM_PRUNE_AT,
            )
        if params.variant == "r2med":
            self._prepare_r2med()
        else:
            self._prepare_lucene()

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        token_lists: Sequence[Sequence[str]],
        *,
        doc_ids: Sequence[str] | None = None,
        variant: str = "r2med",
        k1: float = K1,
        b: float = B,
        workers: int | None = None,
    ) -> BM25Index:
        """Index analysed documents (one token list per corpus row, in corpus order).

        ``doc_ids`` (one per row, repeats allowed) name the documents in
        :meth:`search_run` and decide duplicate handling and Lucene's tie order;
        without them every row is its own document, named by its row number.
        """
        params = BM25Params(variant=variant, k1=k1, b=b)
        if len(token_lists) == 0:
            raise InvalidInputError("cannot build a BM25 index over zero documents")
        vocabulary, counts = count_matrix(token_lists)
        return cls(
            params=params,
            vocabulary=vocabulary,
            counts=counts,
            doc_ids=None if doc_ids is None else [str(d) for d in doc_ids],
            workers=workers,
        )

    def _prepare_r2med(self) -> None:
        p = self.params
        n_docs = self._counts.shape[0]
        self.avgdl = float(self.doc_lengths.sum()) / n_docs  # gensim: sum(cfs) / num_docs
        self.idf = gensim_idf(self.doc_freqs, n_docs)
        c = self._counts
        w = np.zeros(c.nnz, dtype=np.float32)  # no tokens at all: nothing to weight (and nothing a query can match)
        if self.avgdl > 0:
            norm = gensim_length_norm(self.doc_lengths, k1=p.k1, b=p.b, avgdl=self.avgdl)

            # BM25's C kernel: the same float64 operations, in one pass (integer counts, as every index holds; any
            # other type takes NumPy's path, which converts it as it is)
            native = kernel_module.native if c.data.dtype in (np.int32, np.int64) else None
            if native is not None:
                indptr = np.ascontiguousarray(c.indptr) if c.indptr.dtype in (np.int32, np.int64) else \
                    c.indptr.astype(np.int64)
                indices = np.ascontiguousarray(c.indices, dtype=indptr.dtype)
                data = np.ascontiguousarray(c.data)
                idf = np.ascontiguousarray(self.idf, dtype=np.float64)

            def weigh(rows: tuple[int, int]) -> None:  # float64 weights of a range of rows, stored as float32
                if native is not None:
                    native.gensim_weights(indptr, indices, data, norm, idf, w, rows[0], rows[1])
                    return
                e0, e1 = c.indptr[rows[0]], c.indptr[rows[1]]
                row_norm = np.repeat(norm[rows[0]:rows[1]], np.diff(c.indptr[rows[0]:rows[1] + 1]))
                w[e0:e1] = gensim_weights(c.data[e0:e1], row_norm, self.idf[c.indices[e0:e1]])

            in_threads(weigh, row_parts(c.indptr, self._threads()), self._threads())
        self._weights = c.with_data(w)
        self._weights_t: CsrMatrix | None = None  # its transpose, for the C kernel's search (_weights_by_term)

    def _prepare_lucene(self) -> None:
        p = self.params
        # Lucene's docCount counts documents with at least one term in the field
        n_docs = int(np.count_nonzero(self.doc_lengths))
        total = int(self.doc_lengths.sum())
        self.avgdl = np.float32(total / n_docs) if n_docs else np.float32(1.0)
        self.idf = lucene_idf(self.doc_freqs, max(n_docs, 1))
        self.norms = int_to_byte4(self.doc_lengths)
        cache = lucene_norm_inverse(p.k1, p.b, self.avgdl)
        c = self._counts
        x = np.empty(c.nnz, dtype=np.float32)
        unit = np.empty(c.nnz, dtype=np.float64)

        def weigh(rows: tuple[int, int]) -> None:
            e0, e1 = c.indptr[rows[0]], c.indptr[rows[1]]
            row_norm = np.repeat(cache[self.norms[rows[0]:rows[1]]], np.diff(c.indptr[rows[0]:rows[1] + 1]))
            x[e0:e1] = c.data[e0:e1].astype(np.float32) * row_norm  # freq * normInverse, float32
            unit[e0:e1] = lucene_term_scores(self.idf[c.indices[e0:e1]], x[e0:e1])  # boost 1; 2**m scales exactly

        in_threads(weigh, row_parts(c.indptr, self._threads()), self._threads())
        self._x = c.with_data(x)
        self._x_by_term: CsrMatrix | None = None  # the transpose of _x (its columns), made when a query needs it
        self._unit = c.with_data(unit)

    # ------------------------------------------------------------------ properties

    def _threads(self) -> int:
        return default_workers() if self.workers is None else max(1, self.workers)

    @property
    def n_docs(self) -> int:
        """Number of corpus rows (repeated ids counted each time)."""
        return int(self._counts.shape[0])

    def __repr__(self) -> str:
        p = self.params
        return f"BM25Index(variant={p.variant!r}, k1={p.k1}, b={p.b}, docs={self.n_docs}, terms={len(self.vocabulary)})"

    # ------------------------------------------------------------------ search

    def score_all(self, query_token_lists: Sequence[Sequence[str]]) -> np.ndarray:
        """Dense float32 scores, one row per query and one column per corpus row.

        Convenience for small collections and tests; :meth:`search` scores in
        bounded chunks instead.
        """
        q, t, c, known = query_term_counts(query_token_lists, self.token2id)
        n_queries = len(query_token_lists)
        return self._score_block(q, t, c, known, n_queries, self._kernel(n_queries))[0]

    def search(self, query_token_lists: Sequence[Sequence[str]], *, k: int = 100) -> list[Hits]:
        """The top k corpus rows of every query, best first, with their raw float32 scores.

        For a repeated document id the row returned is its first row (see the module
        docstring for the score it carries).

        All queries are scored by matrix products (sparse documents x dense query
        block), in chunks of queries that keep the (terms x queries) and
        (queries x documents) blocks at about 2**22 cells each; selection is
        ``np.partition`` per query with exact tie handling (:func:`top_k`).
        """
        if k < 0:
            raise UsageError(f"k must be >= 0, got {k}")
        n_queries = len(query_token_lists)
        q, t, c, known = query_term_counts(query_token_lists, self.token2id)
        threads = self._threads()
        chunk = max(1, _MAX_BLOCK_CELLS // max(self.n_docs, len(self.vocabulary), 1))
        chunk = min(chunk, max(1, -(-n_queries // threads)))  # at least one chunk per thread
        bounds = np.searchsorted(q, np.arange(0, n_queries + chunk, chunk))
        if self.params.variant == "lucene" and self._x_by_term is None and ((c & (c - 1)) != 0).any():
            self._x_by_term = self._x.by_column()  # for boosts that are no power of two, before the threads share it
        kernel = self._kernel(n_queries)  # one choice for all the chunks (the same sums either way)

        def block(i: int) -> list[Hits]:
            start, stop = i * chunk, min((i + 1) * chunk, n_queries)
            lo, hi = bounds[i], bounds[i + 1]
            scores, matched = self._score_block(
                q[lo:hi] - start, t[lo:hi], c[lo:hi], known[start:stop], stop - start, kernel
            )
            return self._rank(scores, matched, k)

        # every (document, query) score is summed the same way on any thread: the result does not depend on it
        return [h for hits in in_threads(block, range(-(-n_queries // chunk)), threads) for h in hits]

    def search_run(
        self, query_ids: Sequence[str], query_token_lists: Sequence[Sequence[str]], *, k: int = 100
    ) -> dict[str, dict[str, float]]:
        """Like :meth:`search`, as ``{query_id: {doc_id: score}}`` with docs in rank order.

        ``"r2med"``: the float32 scores as Python floats, as the official code's
        ``.tolist()`` gives them. ``"lucene"``: the scores Pyserini reports, i.e.
        passed through Anserini's tie adjuster (:func:`~r2med.retrievers.bm25.ranking.adjust_score_ties`:
        4 decimals, minus 1e-6 per tie) so that trec_eval, which breaks score ties by
        document id, evaluates the run in its ranked order, exactly as it evaluates
        Pyserini's. (With repeated document ids Pyserini adjusts before removing the
        repeats and this after, which can differ by 1e-6 in a run of ties.) A repeated
        query id keeps its last query's hits.
        """
        if len(query_ids) != len(query_token_lists):
            raise InvalidInputError(f"{len(query_ids)} query ids for {len(query_token_lists)} queries")
        names = self.doc_ids if self.doc_ids is not None else _row_ids(self.n_docs)
        lucene = self.params.variant == "lucene"
        run: dict[str, dict[str, float]] = {}
        for qid, h in zip(query_ids, self.search(query_token_lists, k=k)):
            scores = adjust_score_ties(h.scores) if lucene else h.scores
            run[str(qid)] = dict(zip((names[r] for r in h.rows.tolist()), scores.tolist()))
        return run

    def _kernel(self, n_queries: int) -> str:
        """The kernel of the products that score ``n_queries`` queries (:func:`.sparse.choose_kernel`), loaded
        (for the C kernel and gensim's scores: the weights by term, which its search reads)."""
        kernel = choose_kernel(self._weights if self.params.variant == "r2med" else self._unit, n_queries)
        load_kernel(kernel)  # here, before the search's threads
        if kernel == "native" and self.params.variant == "r2med":
            self._weights_by_term()
        return kernel

    def _weights_by_term(self) -> CsrMatrix:
        """The weights' transpose (term x document), made once (by the calling thread, before a search's threads)."""
        if self._weights_t is None:
            self._weights_t = self._weights.by_column()
        return self._weights_t

    def _score_block(
        self, q: np.ndarray, t: np.ndarray, c: np.ndarray, known: np.ndarray, n_queries: int, kernel: str
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scores (n_queries x n_docs, float32) of one chunk; for Lucene also the matched mask.

        The query side is a dense (terms x queries) block and the product is scipy's
        CSR x dense kernel (or NumPy doing the same additions in the same order for a
        small collection, :func:`~r2med.retrievers.bm25.sparse.product`), which for every
        (document, query) pair adds the products term by term in the row's (increasing
        term id) order; adding the zeros of absent query terms leaves a float sum
        unchanged, so this is bit-identical to gensim's sparse x sparse product.
        """
        n_vocab = len(self.vocabulary)
        if self.params.variant == "r2med":
            p = self.params
            norm = gensim_length_norm(known[q], k1=p.k1, b=p.b, avgdl=self.avgdl)
            weights = gensim_weights(c, norm, self.idf[t]).astype(np.float32)
            if kernel == "native":  # the same float32 products and sums, term by term over the documents' columns
                by_term = self._weights_by_term()
                scores = np.zeros((n_queries, self.n_docs), dtype=np.float32)
                query_ptr = np.searchsorted(q, np.arange(n_queries + 1)).astype(np.int64)
                kernel_module.native.score_columns(by_term.indptr, by_term.indices, by_term.data, query_ptr,
                                                   np.ascontiguousarray(t, dtype=np.int64), weights, scores)
                return scores, None
            query = np.zeros((n_vocab, n_queries), dtype=np.float32)
            query[t, q] = weights
            return np.ascontiguousarray(product(self._weights, query, kernel=kernel).T), None  # float32 sums
        # Lucene: boost = query term count; boosts that are powers of two scale the unit
        # term scores exactly, the others are computed term by term.
        pow2 = (c & (c - 1)) == 0
        query = np.zeros((n_vocab, n_queries), dtype=np.float64)
        query[t[pow2], q[pow2]] = c[pow2]
        scores = np.ascontiguousarray(product(self._unit, query, kernel=kernel).T)  # float64 sums, as Lucene's
        if not pow2.all():
            if self._x_by_term is None:
                self._x_by_term = self._x.by_column()
            xt = self._x_by_term
            for qi, ti, ci in zip(q[~pow2].tolist(), t[~pow2].tolist(), c[~pow2].tolist()):
                lo, hi = xt.indptr[ti], xt.indptr[ti + 1]
                weight = np.float32(ci) * self.idf[ti]
                scores[qi, xt.indices[lo:hi]] += lucene_term_scores(weight, xt.data[lo:hi])
        matched = scores > 0
        return scores.astype(np.float32), matched

    def _rank(self, scores: np.ndarray, matched: np.ndarray | None, k: int) -> list[Hits]:
        ids = self._ids
        out: list[Hits] = []
        if self.params.variant == "r2med":
            unique = collapse_official(scores, ids.last_rows) if ids.has_duplicates else scores
            for row in unique:
                pos = top_k(row, k)  # ties: earlier first occurrence first
                out.append(Hits(ids.first_rows[pos] if ids.has_duplicates else pos, row[pos]))
            return out
        if matched is None:  # pragma: no cover - _score_block always gives Lucene a mask
            matched = scores > 0
        if ids.has_duplicates:
            masked = np.where(matched, scores, np.float32(-np.inf))
            unique = collapse_best(masked, ids.group, ids.n_unique)
            for row in unique:
                pos = top_k(row, k, tie_rank=ids.id_rank)
                pos = pos[np.isfinite(row[pos])]
                out.append(Hits(ids.first_rows[pos], row[pos]))
            return out
        for row, hit in zip(scores, matched):
            cand = np.flatnonzero(hit)
            pos = cand[top_k(row[cand], k, tie_rank=ids.id_rank[cand])]
            out.append(Hits(pos, row[pos]))
        return out

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | Path) -> Path:
        """Write the index to ``directory`` (``index.npz`` + ``index.json``), atomically per file."""
        return persist.save_index(
            directory,
            params={"variant": self.params.variant, "k1": self.params.k1, "b": self.params.b},
            vocabulary=self.vocabulary,
            doc_ids=self.doc_ids,
            counts=self.counts,
        )

    @classmethod
    def load(cls, directory: str | Path, *, params: BM25Params | None = None, workers: int | None = None) -> BM25Index:
        """Read an index written by :meth:`save`; weights are recomputed from the counts.

        The file holds term counts only, so one saved index serves every variant and parameter
        setting: ``params`` (default: those it was saved with) decides the weights.
        """
        meta, counts = persist.load_index(directory)
        params = params or BM25Params(**meta["params"])
        return cls(params=params, vocabulary=meta["vocabulary"], counts=counts, doc_ids=meta["doc_ids"], workers=workers)


def _row_ids(n: int) -> list[str]:
    return [str(i) for i in range(n)]
