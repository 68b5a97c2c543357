"""BM25 as a ``Retriever``: analyse, index (cached under R2MED_HOME), search, return a ``Run``."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from r2med import __version__
from r2med.datasets.model import Dataset
from r2med.errors import InvalidInputError, R2MedError
from r2med.io.progress import progress_bar
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.index import BM25Index, BM25Params
from r2med.retrievers.bm25.options import K1, B, BM25Options, system_name
from r2med.retrievers.bm25.parallel import analyze_and_count
from r2med.retrievers.bm25.persist import FORMAT, FORMAT_VERSION
from r2med.types import Run

if TYPE_CHECKING:
    from r2med.expansion.apply import PreparedQueries

logger = logging.getLogger(__name__)

#: Names the analysis the saved term counts come from; change it whenever the analyzer's output may change.
ANALYZER_KEY = "pyserini-0.22.1-default-english/1"


def index_key(dataset: Dataset) -> str:
    """Content key of a dataset's BM25 term counts: corpus bytes (or ids and texts), analyzer, format, version.

    Term counts do not depend on the variant, k1 or b, so one cached index serves them all.
    """
    corpus_hash = dataset.sha256.get("corpus.jsonl")
    if corpus_hash is None:  # built in memory: hash what is indexed
        digest = hashlib.sha256()
        for did, text in zip(dataset.doc_ids, dataset.doc_texts):
            digest.update(did.encode() + b"\0" + text.encode() + b"\0")
        corpus_hash = digest.hexdigest()
    material = {
        "corpus": corpus_hash, "layout": dataset.layout, "analyzer": ANALYZER_KEY,
        "format": f"{FORMAT}/{FORMAT_VERSION}", "r2med": __version__,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class BM25Retriever:
    """BM25 over Lucene's English analysis; ``variant`` ``"r2med"`` (the published numbers) or ``"lucene"``.

    ``cache_dir``: where indexes are kept (``None`` = never saved); ``progress``: show progress bars;
    ``workers``: processes that analyse the corpus and threads that weight and search (default: every core this
    process may use).
    """

    variant: str = "r2med"
    k1: float = K1
    b: float = B
    cache_dir: Path | None = None
    progress: bool = True
    workers: int | None = None
    ignore_identical_ids: bool = False

    def __post_init__(self) -> None:
        self.params = BM25Params(variant=self.variant, k1=self.k1, b=self.b)
        self.analyzer = EnglishAnalyzer()

    @property
    def name(self) -> str:
        """``bm25`` for the published configuration; otherwise the variant and non-default parameters."""
        return system_name(BM25Options(variant=self.variant, k1=self.params.k1, b=self.params.b))

    def describe(self, dataset: str) -> dict:
        """Everything that determines this retriever's run (for manifests and resume keys)."""
        return {"retriever": "bm25", "variant": self.variant, "k1": self.k1, "b": self.b, "analyzer": ANALYZER_KEY,
                "ignore_identical_ids": self.ignore_identical_ids}

    def _build(self, dataset: Dataset) -> BM25Index:
        if not dataset.doc_ids:
            raise InvalidInputError(f"{dataset.name}: cannot build a BM25 index over zero documents")
        texts = dataset.doc_texts
        with progress_bar(len(texts), desc=f"{dataset.name}: BM25 index", unit="doc", enabled=self.progress) as bar:
            vocabulary, counts = analyze_and_count(texts, self.analyzer, workers=self.workers, on_progress=bar.update)
        return BM25Index(
            params=self.params, vocabulary=vocabulary, counts=counts, doc_ids=list(dataset.doc_ids), workers=self.workers
        )

    def index(self, dataset: Dataset) -> BM25Index:
        """The dataset's index: loaded from the cache when its key matches, else built (and saved)."""
        with self._indexed(dataset) as index:
            return index

    @contextmanager
    def _indexed(self, dataset: Dataset) -> Iterator[BM25Index]:
        """``index(dataset)``, saving a newly built index in a thread while the block runs (a search: the save,
        mostly file writes, fsync and hashing, runs without the GIL); the block's end waits for the save.

        The saved index is a cache: a save that fails with an ``OSError`` (a full or read-only disk) is a warning,
        and what the block computed is kept. An error of the block itself is raised after the save has finished
        (atomic writes: an interrupted save leaves no partial index)."""
        folder = self.cache_dir / index_key(dataset) if self.cache_dir is not None else None
        if folder is not None and (folder / "index.json").is_file():
            try:
                index = BM25Index.load(folder, params=self.params, workers=self.workers)
            except R2MedError as exc:
                logger.warning("%s: the cached BM25 index is unusable (%s); rebuilding it", dataset.name, exc)
            else:
                logger.info("%s: reusing the BM25 index in %s", dataset.name, folder)
                yield index
                return
        index = self._build(dataset)
        if folder is None:
            yield index
            return
        with ThreadPoolExecutor(1, thread_name_prefix="r2med-bm25-save") as pool:
            saved = pool.submit(index.save, folder)
            try:
                yield index
            finally:
                wait([saved])
        try:
            saved.result()
        except OSError as exc:
            logger.warning("%s: could not save the BM25 index in %s (%s); it will be built again next time",
                           dataset.name, folder, exc)
        else:
            logger.info("%s: saved the BM25 index in %s", dataset.name, folder)

    def retrieve(self, dataset: Dataset, *, top_k: int = 100) -> Run:
        """Top ``top_k`` documents of every query (ties: see ``BM25Index.search_run``)."""
        with self._indexed(dataset) as index:
            qids = list(dataset.queries)
            tokens = self.analyzer.analyze_many([dataset.queries[q] for q in qids])
            return Run(index.search_run(qids, tokens, k=top_k), name=self.name)

    def retrieve_expanded(
        self, dataset: Dataset, prepared: PreparedQueries, *, top_k: int = 100, composition: str | None = None
    ) -> Run:
        """Search with each query's composed text (``composition``: a BM25 composition, default the method's)."""
        from r2med.expansion.apply import bm25_queries

        return self.retrieve(replace(dataset, queries=bm25_queries(prepared, composition=composition)), top_k=top_k)
