"""Run a system over datasets: retrieve, evaluate, write results in the official layout."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from r2med.datasets.model import Dataset
from r2med.evaluation import evaluate
from r2med.retrievers.base import Retriever
from r2med.store.results import ResultFiles, SystemPath, write_result
from r2med.types import Scores

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetResult:
    dataset: str
    scores: Scores
    files: ResultFiles
    seconds: float


def run_retriever(
    retriever: Retriever,
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    *,
    output: Path,
    top_k: int = 100,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Retrieve, evaluate and store ``retriever`` on each dataset, one at a time.

    ``datasets`` may hold loaders (zero-argument callables) so that a dataset is read only when its
    turn comes and a bad one fails after the earlier ones were written. Each dataset's files are
    complete on disk before the next starts.
    """
    where = SystemPath.base(retriever.name)
    results = []
    for item in datasets:
        start = time.perf_counter()
        dataset = item() if callable(item) else item
        run = retriever.retrieve(dataset, top_k=top_k)
        scores = evaluate(dataset.qrels, run, ignore_identical_ids=retriever.ignore_identical_ids)
        seconds = time.perf_counter() - start
        files = write_result(output, where, dataset.name, scores, run, seconds=seconds)
        logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"], scores.n_queries, files.result)
        result = DatasetResult(dataset.name, scores, files, seconds)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


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
