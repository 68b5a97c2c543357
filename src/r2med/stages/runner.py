"""The one runner: resume, evaluation, storage and the manifest, for every stage alike.

``run_stage`` runs a ``Stage`` (its product is a ``Run``: evaluated, stored as a result set); ``run_file_stage`` a
``FileStage`` (its product is files, such as an expansion file). Both go through the datasets one at a time in the
same way, store each dataset's files atomically with their manifest last, and keep a stored product made by the
same configuration on the same data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from r2med.datasets.model import Dataset
from r2med.errors import IncompleteResultError
from r2med.evaluation import evaluate
from r2med.io.atomic import recorded_writes, write_jsonl_atomic
from r2med.io.lock import DirectoryLock
from r2med.manifest import build_manifest, load_manifest, write_manifest
from r2med.stages.base import DatasetResult, FileStage, ProductResult, Stage
from r2med.stages.products import retire, stored_product, write_product
from r2med.store.result_set import reusable_scores
from r2med.store.results import result_files, write_result

logger = logging.getLogger(__name__)

#: what to do about a product's folder that cannot be written, or that another process is writing
FOLDER_FIX = "make it writable, or set R2MED_HOME (or the command's output folder) to a writable directory"
BUSY_FIX = ("wait for it to finish (it writes the same files: this run changed nothing), or give this run its own "
            "folder (--llm-name, --output)")

#: a dataset, or a zero-argument loader called when its turn comes
DatasetSource = Dataset | Callable[[], Dataset]


#: the form of the configuration that keys a stored result; results whose manifests have an older one (none: r2med
#: before options were declared once) are recomputed once, with a warning (their result files come out the same)
CONFIG_FORMAT = 3


def stage_config(stage: Stage, dataset: Dataset) -> dict[str, Any]:
    """The configuration that keys ``stage``'s result on ``dataset`` (hashed into its manifest)."""
    return {
        "config_format": CONFIG_FORMAT,
        "system": str(stage.where),
        **stage.config(dataset),
        "ignore_identical_ids": stage.ignore_identical_ids,
        "dataset": data_key(dataset),
    }


def data_key(dataset: Dataset) -> dict[str, Any]:
    """What of ``dataset`` keys a product made of it: its name, revision and file hashes."""
    return {"name": dataset.name, "revision": dataset.revision, "sha256": dict(dataset.sha256)}


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

    def step(dataset: Dataset, start: float) -> tuple[DatasetResult | None, str | None]:
        held.acquire()
        config = stage_config(stage, dataset)
        files = result_files(output, stage.where, dataset.name)
        scores = reusable_scores(files, config, dataset=dataset.name) if resume else None
        if scores is not None and hasattr(stage, "stored_problem"):  # files outside the result set it depends on
            problem = stage.stored_problem(dataset, (load_manifest(files.result) or {}).get("details") or {})
            if problem is not None:
                logger.warning("%s: the stored result %s is not reused: %s; making it again", dataset.name,
                               files.result, problem)
                scores = None
        if scores is not None:
            logger.info("%s: reusing the stored result %s (same configuration and data)", dataset.name, files.result)
            return DatasetResult(dataset.name, scores, files, 0.0, reused=True), None
        try:
            return _compute(stage, dataset, config, output, start), None
        except IncompleteResultError as exc:  # its files are written; the other datasets still run
            return None, str(exc)

    try:
        return _each(datasets, step, on_result, str(stage.where))
    finally:
        if own:
            held.release()


def run_file_stage(
    stage: FileStage,
    datasets: Iterable[DatasetSource],
    *,
    resume: bool = True,
    on_result: Callable[[ProductResult], None] | None = None,
) -> list[ProductResult]:
    """Make and store ``stage``'s files for each dataset, one at a time (``datasets`` as for ``run_stage``).

    Each dataset's folder (``stage.folder``) is locked while its files are made (``ResultsBusyError``, exit 6, for a
    second process). With ``resume`` a stored product whose manifest records the same configuration and dataset
    files, and whose files match it, is kept (its outcome from ``stage.reused``); a file of it edited or damaged is
    DamagedFileError (exit 5) naming it. Otherwise the product is made, its files written atomically and their
    manifest last (``r2med.stages.products``). An incomplete product (``Product.problem``) is written without a
    manifest, handed to ``on_result`` like the others, and the run ends with ``IncompleteResultError`` (exit 6)
    after the other datasets; a product's ``halt`` is raised as soon as its files are written.
    """

    def step(dataset: Dataset, start: float) -> tuple[ProductResult, str | None]:
        folder = stage.folder(dataset)
        anchor = folder / f"{stage.anchor}.json"
        with DirectoryLock(folder, what=f"the folder of {stage.name}", fix=FOLDER_FIX, busy_fix=BUSY_FIX) as lock:
            lock.acquire()
            config = {"system": stage.name, **stage.config(dataset), "dataset": data_key(dataset)}
            details = stored_product(anchor, config, dataset=dataset.name) if resume else None
            if details is not None:
                logger.info("%s: keeping the stored files of %s in %s (same configuration and data)", dataset.name,
                            stage.name, folder)
                outcome = stage.reused(dataset, details)
                return ProductResult(dataset.name, folder, time.perf_counter() - start, outcome, reused=True), None
            product = stage.produce(dataset)
            write_product(anchor, product, system=stage.name, dataset=dataset, config=config, start=start)
        if product.halt is not None:
            raise product.halt
        return ProductResult(dataset.name, folder, time.perf_counter() - start, product.outcome), product.problem

    return _each(datasets, step, on_result, stage.name)


#: one dataset's turn: its result (None when it has none) and why it is incomplete (None when it is not)
Step = Callable[[Dataset, float], tuple[Any, str | None]]


def _each(datasets: Iterable[DatasetSource], step: Step, on_result: Callable[[Any], None] | None,
          name: str) -> list[Any]:
    """``step`` on each dataset in turn (a loader is called when its turn comes): the results, each handed to
    ``on_result`` as it comes; IncompleteResultError at the end naming every incomplete dataset."""
    results = []
    incomplete: list[str] = []
    for item in datasets:
        start = time.perf_counter()
        dataset = item() if callable(item) else item
        result, problem = step(dataset, start)
        if problem is not None:
            logger.error("%s: %s", dataset.name, problem)
            incomplete.append(f"{dataset.name}: {problem}")
        if result is not None:
            results.append(result)
            if on_result is not None:
                on_result(result)
    if incomplete:
        raise IncompleteResultError(f"{name}: {len(incomplete)} dataset(s) incomplete, their results not stored "
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
    retire(planned.result, {*planned.scored, *artifact_paths.values()})
    with recorded_writes() as written:
        for suffix, rows in artifacts.items():
            write_jsonl_atomic(artifact_paths[suffix], rows)
        files = write_result(output, stage.where, dataset.name, scores, run, seconds=seconds)
    for suffix, note in getattr(stage, "artifact_notes", lambda _: [])(dataset):  # "see the window log": which file it is
        logger.warning("%s %s", note, artifact_paths[suffix])
    timings = {"search": searched - start, "evaluate": time.perf_counter() - searched, "total": seconds}
    details = stage.details(dataset)
    members = {path.name: digest for path, digest in written.items()}
    write_manifest(files.result, build_manifest(system=str(stage.where), dataset=dataset, config=config,
                                                timings=timings, details=details, files=members))
    logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"],
                scores.n_queries, files.result)
    return DatasetResult(dataset.name, scores, files, seconds, details=details)
