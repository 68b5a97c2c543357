"""The one runner: resume, evaluation, storage and the manifest, for every stage alike."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from r2med.datasets.model import Dataset
from r2med.evaluation import evaluate
from r2med.io.atomic import write_atomic
from r2med.manifest import build_manifest, config_sha256, read_manifest, write_manifest
from r2med.stages.base import DatasetResult, Stage
from r2med.store.results import ResultFiles, read_result, result_files, write_result
from r2med.types import Scores

logger = logging.getLogger(__name__)

#: a dataset, or a zero-argument loader called when its turn comes
DatasetSource = Dataset | Callable[[], Dataset]


def stage_config(stage: Stage, dataset: Dataset) -> dict[str, Any]:
    """The configuration that keys ``stage``'s result on ``dataset`` (hashed into its manifest)."""
    return {
        "system": str(stage.where),
        **stage.config(dataset),
        "ignore_identical_ids": stage.ignore_identical_ids,
        "dataset": {"name": dataset.name, "revision": dataset.revision, "sha256": dict(dataset.sha256)},
    }


def reusable(files: ResultFiles, config: dict[str, Any]) -> bool:
    """Whether a complete stored result was made by exactly ``config`` (its manifest's hash)."""
    if not (files.result.is_file() and files.run.is_file() and files.per_query.is_file()):
        return False
    manifest = read_manifest(files.result)
    return manifest is not None and manifest.get("config_sha256") == config_sha256(config)


def stored_scores(files: ResultFiles) -> Scores:
    """The scores of a stored result: 5-decimal means from its JSON, per-query values from its JSONL."""
    per_query = {}
    with files.per_query.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                per_query[row.pop("qid")] = row
    return Scores(dict(read_result(files.result)["test"]), per_query)


def run_stage(
    stage: Stage,
    datasets: Iterable[DatasetSource],
    *,
    output: Path,
    resume: bool = True,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Run, evaluate and store ``stage`` on each dataset, one at a time.

    ``datasets`` may hold loaders (zero-argument callables), so that a dataset is read only when its turn
    comes and a bad one fails after the earlier ones were written. Each dataset's files are complete on
    disk before the next starts: the stage's artifacts, the run, the per-query values, the result JSON,
    the manifest (``<Dataset>.manifest.json``) last. With ``resume`` a stored result whose manifest has the
    same configuration (and dataset files) is reused instead of recomputed.
    """
    results = []
    for item in datasets:
        start = time.perf_counter()
        dataset = item() if callable(item) else item
        config = stage_config(stage, dataset)
        files = result_files(output, stage.where, dataset.name)
        if resume and reusable(files, config):
            logger.info("%s: reusing the stored result %s (same configuration and data)", dataset.name, files.result)
            result = DatasetResult(dataset.name, stored_scores(files), files, 0.0, reused=True)
        else:
            result = _compute(stage, dataset, config, output, start)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _compute(stage: Stage, dataset: Dataset, config: dict[str, Any], output: Path, start: float) -> DatasetResult:
    run = stage.run(dataset)
    searched = time.perf_counter()
    for suffix, rows in stage.artifacts(dataset).items():
        _write_jsonl(stage.where.directory(output) / f"{dataset.name}.{suffix}.jsonl", rows)
    scores = evaluate(dataset.qrels, run, ignore_identical_ids=stage.ignore_identical_ids)
    seconds = time.perf_counter() - start
    files = write_result(output, stage.where, dataset.name, scores, run, seconds=seconds)
    timings = {"search": searched - start, "evaluate": time.perf_counter() - searched, "total": seconds}
    details = stage.details(dataset)
    write_manifest(files.result, build_manifest(system=str(stage.where), dataset=dataset, config=config,
                                                timings=timings, details=details))
    logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"],
                scores.n_queries, files.result)
    return DatasetResult(dataset.name, scores, files, seconds, details=details)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    def body(handle: IO[str]) -> None:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")

    write_atomic(path, body)
