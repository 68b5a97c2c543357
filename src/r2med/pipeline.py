"""Run a system over datasets: retrieve, evaluate, write results in the official layout."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from r2med.datasets.model import Dataset
from r2med.evaluation import evaluate
from r2med.retrievers.base import Retriever
from r2med.settings import Settings
from r2med.store.results import ResultFiles, SystemPath, write_result
from r2med.types import Run, Scores

if TYPE_CHECKING:
    from r2med.expansion.apply import PreparedQueries

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetResult:
    dataset: str
    scores: Scores
    files: ResultFiles
    seconds: float


def run_system(
    where: SystemPath,
    search: Callable[[Dataset], Run],
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    *,
    output: Path,
    ignore_identical_ids: bool = False,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Search, evaluate and store one system on each dataset, one at a time.

    ``search(dataset)`` returns the system's run. ``datasets`` may hold loaders (zero-argument
    callables) so that a dataset is read only when its turn comes and a bad one fails after the
    earlier ones were written. Each dataset's files are complete on disk before the next starts.
    """
    results = []
    for item in datasets:
        start = time.perf_counter()
        dataset = item() if callable(item) else item
        run = search(dataset)
        scores = evaluate(dataset.qrels, run, ignore_identical_ids=ignore_identical_ids)
        seconds = time.perf_counter() - start
        files = write_result(output, where, dataset.name, scores, run, seconds=seconds)
        logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"], scores.n_queries, files.result)
        result = DatasetResult(dataset.name, scores, files, seconds)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def run_retriever(
    retriever: Retriever,
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    *,
    output: Path,
    top_k: int = 100,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """A base retriever on each dataset; results under ``<output>/base retriever/<name>/``."""
    return run_system(
        SystemPath.base(retriever.name), lambda dataset: retriever.retrieve(dataset, top_k=top_k), datasets,
        output=output, ignore_identical_ids=retriever.ignore_identical_ids, on_result=on_result,
    )


def run_gar(
    retriever: Retriever,
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    *,
    method: str,
    llm: str,
    output: Path,
    top_k: int = 100,
    policy: str = "fallback",
    composition: str | None = None,
    settings: Settings | None = None,
    on_prepared: Callable[[Dataset, PreparedQueries], None] | None = None,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Generation-augmented retrieval with ``method``/``llm``'s expansions (published or generated).

    Results go to ``<output>/gar/<method>/<llm>/<retriever>/``; a non-default BM25 ``composition``
    (``query2doc-spaced``) is stored under its own name in place of the method.
    """
    from r2med.expansion.apply import prepare_queries, retrieve_expanded
    from r2med.expansion.published import load_expansions

    def search(dataset: Dataset) -> Run:
        prepared = prepare_queries(dataset, load_expansions(dataset, method, llm, settings=settings), policy=policy)
        if on_prepared is not None:
            on_prepared(dataset, prepared)
        return retrieve_expanded(retriever, dataset, prepared, top_k=top_k, composition=composition)

    where = SystemPath.gar(composition or method, llm, retriever.name)
    return run_system(where, search, datasets, output=output, ignore_identical_ids=retriever.ignore_identical_ids, on_result=on_result)


def summarise(results: list[DatasetResult]) -> dict[str, dict[str, float]]:
    """``{"<Dataset>": {key: 5-decimal mean}, ..., "average": {key: mean over datasets}}``.

    >>> from r2med.types import Scores
    >>> fake = [DatasetResult(n, Scores({"ndcg_at_10": v}), None, 0.0) for n, v in (("A", 0.1), ("B", 0.2))]
    >>> summarise(fake)
    {'A': {'ndcg_at_10': 0.1}, 'B': {'ndcg_at_10': 0.2}, 'average': {'ndcg_at_10': 0.15}}
    """
    table = {r.dataset: r.scores.rounded(5) for r in results}
    if results:
        keys = list(table[results[0].dataset])
        table["average"] = {k: round(sum(row[k] for row in table.values()) / len(results), 5) for k in keys}
    return table
