"""Dense retrieval as the official numbers were made: instruction + text, cosine similarity
(BEIR's ``cos_sim``: both sides L2-normalised, whatever the model's own normalisation), exact search,
and BEIR's ``ignore_identical_ids`` (a document whose id equals the query id is dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from r2med.batching import TextTooLongError
from r2med.datasets.model import Dataset
from r2med.errors import UsageError
from r2med.retrievers.dense.base import Encoder
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.search import exact_search
from r2med.types import Run

if TYPE_CHECKING:
    from r2med.expansion.apply import PreparedQueries

logger = logging.getLogger(__name__)


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32.

    >>> l2_normalise(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def _normalised(blocks: Iterator[tuple[int, np.ndarray]]) -> Iterator[tuple[int, np.ndarray]]:
    for offset, block in blocks:
        yield offset, l2_normalise(block)


def compose_mean(base: np.ndarray, expanded: np.ndarray, qids: list[str], expansions: dict[str, str]) -> np.ndarray:
    """Per query the mean of its plain embedding and its expansion's (rows of ``expanded`` follow
    the queries that have an expansion, in order); queries without one keep the plain embedding.

    >>> compose_mean(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[0.0, 1.0]]), ["a", "b"], {"a": "x"}).tolist()
    [[0.5, 0.5], [0.0, 2.0]]
    """
    out = np.array(base, dtype=np.float32, copy=True)
    rows = [i for i, q in enumerate(qids) if q in expansions]
    if rows:
        out[rows] = (out[rows] + np.asarray(expanded, dtype=np.float32)) / 2
    return out


def _embed_named(cache: EmbeddingCache, encoder: Encoder, texts: list[str], ids: list[str], what: str, **kwargs):
    """``cache.embed``; a text that does not fit in memory alone is named by its id (``document 'PMC123'``)."""
    try:
        return cache.embed(encoder, texts, **kwargs)
    except TextTooLongError as exc:
        if not 0 <= exc.index < len(ids):
            raise
        raise exc.relabel(f"{what} '{ids[exc.index]}'") from None


@dataclass
class DenseRetriever:
    """A bi-encoder over a dataset.

    ``instructions(dataset_name) -> (query_instruction, document_instruction)``; ``cache`` keeps
    every embedding on disk by content. ``ignore_identical_ids`` defaults to True, as the official
    dense numbers were scored.
    """

    name: str
    encoder: Encoder
    instructions: Callable[[str], tuple[str, str]]
    cache: EmbeddingCache
    batch_size: int | None = None
    progress: bool = True
    ignore_identical_ids: bool = True

    def describe(self, dataset: str) -> dict:
        """Everything that determines this retriever's run (for manifests and resume keys)."""
        query_instruction, doc_instruction = self.instructions(dataset)
        key = getattr(self.encoder, "cache_key", None)
        return {
            "retriever": self.name,
            "query_encoder": key("query") if key else type(self.encoder).__name__,
            "document_encoder": key("document") if key else type(self.encoder).__name__,
            "query_instruction": query_instruction,
            "document_instruction": doc_instruction,
            "ignore_identical_ids": self.ignore_identical_ids,
        }

    def embed_queries(self, dataset: Dataset, texts: list[str], qids: list[str] | None = None) -> np.ndarray:
        query_instruction, _ = self.instructions(dataset.name)
        qids = list(dataset.queries) if qids is None else qids
        stored = _embed_named(self.cache, self.encoder, texts, qids if len(qids) == len(texts) else [], "query",
                              kind="query", instruction=query_instruction, batch_size=self.batch_size,
                              progress=self.progress)
        return stored.array()

    def _embed_corpus(self, dataset: Dataset, doc_instruction: str):
        corpus = dataset.corpus
        return _embed_named(self.cache, self.encoder, list(corpus.values()), list(corpus), "document",
                            kind="document", instruction=doc_instruction, batch_size=self.batch_size,
                            progress=self.progress)

    def retrieve(self, dataset: Dataset, *, top_k: int = 100) -> Run:
        """Top ``top_k`` documents per query by cosine; with ``ignore_identical_ids`` the query's own id is skipped."""
        corpus = dataset.corpus  # a repeated document id keeps its last text, as BEIR's loader does
        doc_ids = list(corpus)
        _, doc_instruction = self.instructions(dataset.name)
        docs = self._embed_corpus(dataset, doc_instruction)
        qids = list(dataset.queries)
        queries = self.embed_queries(dataset, [dataset.queries[q] for q in qids])
        return self.search(qids, queries, doc_ids, docs.blocks(), top_k=top_k)

    def retrieve_expanded(
        self, dataset: Dataset, prepared: PreparedQueries, *, top_k: int = 100, composition: str | None = None
    ) -> Run:
        """Search with the expansion file's query texts and the chosen expansions, composed as the official dense
        numbers were (``search_expanded``). ``composition`` is BM25's: only None or the method's own name pass."""
        if composition not in (None, prepared.method):
            raise UsageError(f"--bm25-composition {composition!r} applies to BM25 only, not to {self.name}")
        return self.search_expanded(replace(dataset, queries=prepared.queries), prepared.expansions,
                                    method=prepared.method, reasoning=prepared.reasoning, top_k=top_k)

    def search_expanded(
        self, dataset: Dataset, expansions: dict[str, str], *, method: str, reasoning: bool = False, top_k: int = 100
    ) -> Run:
        """Generation-augmented retrieval composed by the dense rule of ``method`` (``r2med.expansion.methods``).

        One text (query2doc: ``query + "[SEP]" + expansion``) is embedded with the query instruction. A pair
        (hyde, lamer, reasoning models' answers, agentic search): the mean of embed(instruction + query) and
        embed(expansion), the expansion without instruction; then cosine search (so the mean is normalised).
        Queries without an expansion keep their plain embedding and are counted in a warning.
        """
        from r2med.expansion.methods import gar_method

        rule = gar_method(method).dense
        joined = len(rule("", "", reasoning)) == 1
        qids = list(dataset.queries)
        texts = [dataset.queries[q] for q in qids]
        missing = [q for q in qids if q not in expansions]
        if missing:
            logger.warning("%s: %d queries have no expansion (e.g. %r); they are searched with the query alone", dataset.name, len(missing), missing[0])
        corpus = dataset.corpus
        _, doc_instruction = self.instructions(dataset.name)
        docs = self._embed_corpus(dataset, doc_instruction)
        if joined:
            composed = [rule(t, expansions[q], reasoning)[0] if q in expansions else t for q, t in zip(qids, texts)]
            queries = self.embed_queries(dataset, composed)
        else:
            queries = compose_mean(self.embed_queries(dataset, texts), self._embed_expansions(qids, expansions), qids, expansions)
        return self.search(qids, queries, list(corpus), docs.blocks(), top_k=top_k)

    def _embed_expansions(self, qids: list[str], expansions: dict[str, str]) -> np.ndarray:
        texts = [expansions[q] for q in qids if q in expansions]
        ids = [q for q in qids if q in expansions]
        stored = _embed_named(self.cache, self.encoder, texts, ids, "the expansion of query", kind="query",
                              instruction="", batch_size=self.batch_size, progress=self.progress)
        return stored.array()

    def search(self, qids: list[str], queries: np.ndarray, doc_ids: list[str], blocks, *, top_k: int) -> Run:
        """Exact cosine search; one extra candidate per query when identical ids are dropped (BEIR retrieves k+1)."""
        k = top_k + 1 if self.ignore_identical_ids else top_k
        positions, scores = exact_search(l2_normalise(queries), _normalised(blocks), k)
        run = Run(name=self.name)
        for qid, rows, values in zip(qids, positions.tolist(), scores.tolist()):
            hits = {}
            for row, score in zip(rows, values):
                did = doc_ids[row]
                if self.ignore_identical_ids and did == qid:
                    continue
                if len(hits) < top_k:
                    hits[did] = score
            run[qid] = hits
        return run
