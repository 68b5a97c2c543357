"""Dense retrieval as the official numbers were made: instruction + text, cosine similarity
(BEIR's ``cos_sim``: both sides L2-normalised, whatever the model's own normalisation), exact search,
and BEIR's ``ignore_identical_ids`` (a document whose id equals the query id is dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from r2med.datasets.model import Dataset
from r2med.retrievers.dense.base import Encoder
from r2med.retrievers.dense.cache import EmbeddingCache
from r2med.retrievers.dense.search import exact_search
from r2med.types import Run

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
    last_counts: dict = field(default_factory=dict)

    def embed_queries(self, dataset: Dataset, texts: list[str]) -> np.ndarray:
        query_instruction, _ = self.instructions(dataset.name)
        stored = self.cache.embed(self.encoder, texts, kind="query", instruction=query_instruction,
                                  batch_size=self.batch_size, progress=self.progress)
        return stored.array()

    def retrieve(self, dataset: Dataset, *, top_k: int = 100) -> Run:
        """Top ``top_k`` documents per query by cosine; with ``ignore_identical_ids`` the query's own id is skipped."""
        corpus = dataset.corpus  # a repeated document id keeps its last text, as BEIR's loader does
        doc_ids = list(corpus)
        _, doc_instruction = self.instructions(dataset.name)
        docs = self.cache.embed(self.encoder, list(corpus.values()), kind="document", instruction=doc_instruction,
                                batch_size=self.batch_size, progress=self.progress)
        qids = list(dataset.queries)
        queries = self.embed_queries(dataset, [dataset.queries[q] for q in qids])
        return self.search(qids, queries, doc_ids, docs.blocks(), top_k=top_k)

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
