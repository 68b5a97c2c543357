"""Search one corpus many times with any r2med retriever: texts in, ranked ``(docid, score)`` lists out.

An agent (``r2med agent``) and the retrieval server (``r2med serve``) search the same corpus with query texts
that are only known as they come. :func:`open_searcher` builds the retriever's index once (BM25: the cached
index; dense: the cached document embeddings, held in memory) and returns a :class:`CorpusSearcher`. How
each retriever family is opened is a table (``OPENERS``, by retriever class); any other object that
implements the ``Retriever`` protocol is searched through its ``retrieve`` with the texts as queries.

Rankings follow trec_eval's order (score descending, ties by docid descending), as every r2med run does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import UsageError
from r2med.retrievers.base import Retriever
from r2med.types import Run

logger = logging.getLogger(__name__)

#: ``search(texts, k) -> one ranked [(docid, score), ...] per text``
SearchFn = Callable[[Sequence[str], int], list[list[tuple[str, float]]]]


def _ranked(hits: dict[str, dict[str, float]], keys: Sequence[str]) -> list[list[tuple[str, float]]]:
    run = Run(hits)
    return [run.ranked(key) if key in run else [] for key in keys]


def _bm25(retriever: Any, corpus: Dataset) -> SearchFn:
    index = retriever.index(corpus)

    def search(texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        keys = [str(i) for i in range(len(texts))]
        tokens = retriever.analyzer.analyze_many(list(texts))
        return _ranked(index.search_run(keys, tokens, k=k), keys)

    return search


def _dense(retriever: Any, corpus: Dataset) -> SearchFn:
    from r2med.retrievers.dense.retriever import l2_normalise
    from r2med.retrievers.dense.search import exact_search

    documents = corpus.corpus
    doc_ids = list(documents)
    query_instruction, doc_instruction = retriever.instructions(corpus.name)
    stored = retriever.cache.embed(retriever.encoder, list(documents.values()), kind="document",
                                   instruction=doc_instruction, batch_size=retriever.batch_size,
                                   progress=retriever.progress)
    matrix = l2_normalise(stored.array())

    def search(texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        queries = retriever.encoder.encode(list(texts), kind="query", instruction=query_instruction,
                                           batch_size=retriever.batch_size)
        positions, scores = exact_search(l2_normalise(queries), [(0, matrix)], k)
        keys = [str(i) for i in range(len(texts))]
        hits = {key: {doc_ids[p]: float(s) for p, s in zip(rows, values)}
                for key, rows, values in zip(keys, positions.tolist(), scores.tolist())}
        return _ranked(hits, keys)

    return search


def _generic(retriever: Retriever, corpus: Dataset) -> SearchFn:
    taken = set(corpus.doc_ids)

    def search(texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        keys = []
        for i in range(len(texts)):  # query ids no document has: a retriever that drops identical ids drops none
            key = f"r2med-search-{i}"
            while key in taken:
                key += "_"
            keys.append(key)
        run = retriever.retrieve(replace(corpus, queries=dict(zip(keys, texts)), qrels={}), top_k=k)
        return [run.ranked(key) if key in run else [] for key in keys]

    return search


def _openers() -> dict[type, Callable[[Any, Dataset], SearchFn]]:
    from r2med.retrievers.bm25.retriever import BM25Retriever

    table: dict[type, Callable[[Any, Dataset], SearchFn]] = {BM25Retriever: _bm25}
    try:
        from r2med.retrievers.dense.retriever import DenseRetriever
    except ImportError:  # pragma: no cover - numpy is a core dependency; dense extras load lazily
        return table
    table[DenseRetriever] = _dense
    return table


@dataclass
class CorpusSearcher:
    """A retriever opened over one corpus. ``search`` is thread-safe (one search at a time).

    ``retriever``: its name; ``corpus``: the corpus name; ``source``: "dataset" (the dataset's own corpus) or
    the knowledge directory it came from; ``documents``: ``docid -> text`` (the last text of a repeated id).
    """

    retriever: str
    corpus: str
    source: str
    documents: dict[str, str]
    describe: dict[str, Any]
    _search: SearchFn
    _lock: threading.Lock

    def search(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """The top ``k`` ``(docid, score)`` of each text, best first."""
        if k < 1:
            raise UsageError(f"a search needs top k >= 1, got {k}")
        texts = [str(t) for t in texts]
        if not texts:
            return []
        with self._lock:
            return self._search(texts, k)

    def config(self) -> dict[str, Any]:
        """What determines every search's result (recorded in manifests and summaries)."""
        return {"retriever": self.describe, "corpus": self.corpus, "source": self.source}


def open_searcher(retriever: Retriever, corpus: Dataset, *, source: str = "dataset") -> CorpusSearcher:
    """Open ``retriever`` over ``corpus`` (index or embed it now, from the caches when they hold it)."""
    if not corpus.doc_ids:
        raise UsageError(f"{corpus.name}: the corpus to search has no documents")
    opener = next((fn for kind, fn in _openers().items() if isinstance(retriever, kind)), _generic)
    describe_fn = getattr(retriever, "describe", None)
    describe = describe_fn(corpus.name) if describe_fn is not None else {"retriever": retriever.name}
    logger.info("%s: opening %s for searches (%d documents)", corpus.name, retriever.name, len(corpus.doc_ids))
    return CorpusSearcher(retriever.name, corpus.name, source, corpus.corpus, describe,
                          opener(retriever, corpus), threading.Lock())


def search_r1_contents(docid: str, text: str) -> str:
    """A document as Search-R1's corpus stores it (``contents``: the quoted title, a newline, the text). R2MED's
    documents have no title: the document id stands in for it, so the model (and a reader of its trajectory)
    sees which document each passage is.

    >>> search_r1_contents("d7", "Aspirin inhibits COX-1.")
    '"d7"\\nAspirin inhibits COX-1.'
    """
    return f'"{docid}"\n{text}'
