"""The one runner: resume, evaluation, storage and the manifest, for every stage alike."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import DamagedFileError, IncompleteResultError
from r2med.evaluation import evaluate
from r2med.io.atomic import recorded_writes, remove_file, write_jsonl_atomic
from r2med.io.lock import DirectoryLock
from r2med.manifest import build_manifest, load_manifest, write_manifest
from r2med.stages.base import DatasetResult, Stage
from r2med.store.result_set import ResultFiles, recorded_files, reusable_scores
from r2med.store.results import result_files, write_result

logger = logging.getLogger(__name__)

#: a dataset, or a zero-argument loader called when its turn comes
DatasetSource = Dataset | Callable[[], Dataset]


#: the form of the configuration that keys a stored result; results whose manifests have an older one (none: r2med
#: before options were declared once) are recomputed once, with a warning (their result files come out the same)
CONFIG_FORMAT = 2


def stage_config(stage: Stage, dataset: Dataset) -> dict[str, Any]:
    """The configuration that keys ``stage``'s result on ``dataset`` (hashed into its manifest)."""
    return {
        "config_format": CONFIG_FORMAT,
        "system": str(stage.where),
        **stage.config(dataset),
        "ignore_identical_ids": stage.ignore_identical_ids,
        "dataset": {"name": dataset.name, "revision": dataset.revision, "sha256": dict(dataset.sha256)},
    }


def run_stage(
    stage: Stage,
    datasets: Iterable[DatasetSource],
    *,
    output: Path,
    resume: bool = True,
    on_result: Callable[[DatasetResult], None] | None = None,
    lock: DirectoryLock | None = None,
) -> list[DatasetResult]:
    """Run, evaluate and store ``stage`` on each dataset, one at a time.

    ``datasets`` may hold loaders (zero-argument callables), so that a dataset is read only when its turn
    comes and a bad one fails after the earlier ones were written. Each dataset's result set is complete on
    disk before the next starts: the stage's artifacts, the run, the per-query values, the result JSON, and
    last the manifest (``<Dataset>.manifest.json``), which records the sha256 and size of each of them. With
    ``resume`` a stored result whose manifest has the same configuration (and dataset files), and whose
    every file matches the manifest, is reused instead of recomputed; a damaged one is recomputed with a
    warning.

    The results directory is locked (``<output>/.r2med.lock``) from the first dataset on: a second r2med process
    writing there is refused (``ResultsBusyError``, exit 6). ``lock``: a lock the caller holds for longer (a
    pipeline holds one over all its stages); by default the stage takes and releases its own.
    """
    own = lock is None
    held = DirectoryLock(output) if lock is None else lock
    results = []
    incomplete: list[str] = []
    try:
        for item in datasets:
            start = time.perf_counter()
            dataset = item() if callable(item) else item
            held.acquire()
            config = stage_config(stage, dataset)
            files = result_files(output, stage.where, dataset.name)
            scores = reusable_scores(files, config, dataset=dataset.name) if resume else None
            if scores is not None:
                logger.info("%s: reusing the stored result %s (same configuration and data)", dataset.name, files.result)
                result = DatasetResult(dataset.name, scores, files, 0.0, reused=True)
            else:
                try:
                    result = _compute(stage, dataset, config, output, start)
                except IncompleteResultError as exc:  # its files are written; the other datasets still run
                    logger.error("%s: %s", dataset.name, exc)
                    incomplete.append(f"{dataset.name}: {exc}")
                    continue
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        if own:
            held.release()
    if incomplete:
        raise IncompleteResultError(f"{stage.where}: {len(incomplete)} dataset(s) incomplete, their results not stored "
                                    f"(rerun to finish them): " + "; ".join(incomplete))
    return results


def _compute(stage: Stage, dataset: Dataset, config: dict[str, Any], output: Path, start: float) -> DatasetResult:
    run = stage.run(dataset)
    searched = time.perf_counter()
    artifacts = stage.artifacts(dataset)
    scores = evaluate(dataset.qrels, run, ignore_identical_ids=stage.ignore_identical_ids,
                      judged_all=getattr(stage, "judged_all", False))
    seconds = time.perf_counter() - start
    planned = result_files(output, stage.where, dataset.name)
    artifact_paths = {suffix: planned.artifact(suffix) for suffix in artifacts}
    _retire(planned, {*planned.scored, *artifact_paths.values()})
    with recorded_writes() as written:
        for suffix, rows in artifacts.items():
            write_jsonl_atomic(artifact_paths[suffix], rows)
        files = write_result(output, stage.where, dataset.name, scores, run, seconds=seconds)
    timings = {"search": searched - start, "evaluate": time.perf_counter() - searched, "total": seconds}
    details = stage.details(dataset)
    members = {path.name: digest for path, digest in written.items()}
    write_manifest(files.result, build_manifest(system=str(stage.where), dataset=dataset, config=config,
                                                timings=timings, details=details, files=members))
    logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"],
                scores.n_queries, files.result)
    return DatasetResult(dataset.name, scores, files, seconds, details=details)


def _retire(files: ResultFiles, keep: set[Path]) -> None:
    """Before a new set is written: remove the old set's files the new one will not replace, then its manifest.

    In this order a kill at any point leaves either the old set whole but for files it no longer matches, or no
    manifest at all: never a manifest beside files it does not describe, nor an old artifact beside a new set.
    """
    try:
        manifest = load_manifest(files.result)
        old = set(recorded_files(files, manifest)) if manifest is not None else set()
    except DamagedFileError:
        old = set()
    for stale in sorted(old - keep - {files.manifest}):
        remove_file(stale)
    remove_file(files.manifest)
