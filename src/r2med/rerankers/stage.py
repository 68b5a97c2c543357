"""The reranking stage of a pipeline: first-stage run in, reranked run evaluated and stored in the official layout.

``rerank_results`` reranks each dataset's first-stage run and writes, through ``pipeline.run_system``,
``<out>/reranker/<reranker>/<system>/top_<k>/<Dataset>.run|.per_query.jsonl|.json|.manifest.json``;
a listwise reranker also leaves ``<Dataset>.windows.jsonl`` (every window's documents, new order,
repairs and reasoning trace). ``r2med run --reranker`` calls it after retrieval. ``FirstStage``
finds the first-stage run of each dataset from a system name, a system path, a directory or a file.

Reranked runs are scored without BEIR's identical-id rule by default, as the official reranker
numbers were.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from r2med.datasets.model import Dataset
from r2med.errors import MissingResourceError, UsageError
from r2med.io.atomic import write_atomic
from r2med.pipeline import DatasetResult
from r2med.rerankers.base import Reranker, check_top_k
from r2med.store.results import BASE, SystemPath
from r2med.store.runs import read_run
from r2med.types import Run

logger = logging.getLogger(__name__)

RUN_SUFFIXES = (".run", ".trec", ".jsonl", ".txt")


def run_digest(run: Run) -> str:
    """sha256 over a run's queries, documents and scores in rank order (what the reranker reads).

    >>> run_digest(Run({"q": {"a": 1.0, "b": 2.0}})) == run_digest(Run({"q": {"b": 2.0, "a": 1.0}}))
    True
    """
    digest = hashlib.sha256()
    for qid in sorted(run):
        for doc, score in run.ranked(qid):
            digest.update(f"{qid}\t{doc}\t{score!r}\n".encode())
    return digest.hexdigest()


def describe(reranker: Reranker) -> dict[str, Any]:
    """What determines a reranker's output (its ``describe()``, or its class and name)."""
    own = getattr(reranker, "describe", None)
    return dict(own()) if callable(own) else {"class": type(reranker).__name__, "name": reranker.name}


@dataclass(frozen=True)
class FirstStage:
    """Where the first-stage runs are: one ``file`` for every dataset, or ``directory/<Dataset>.run``.

    ``system`` names the first stage in the reranker's results path.
    """

    system: str
    directory: Path | None = None
    file: Path | None = None

    @classmethod
    def resolve(cls, spec: str | Path, *, output: Path, system: str | None = None) -> FirstStage:
        """From a run file, a directory of runs, a system path (``gar/hyde/gpt4/nv``) or a system name under ``output``.

        >>> FirstStage.resolve("bm25", output=Path("results"))
        FirstStage(system='bm25', directory=PosixPath('results/base retriever/bm25'), file=None)
        >>> FirstStage.resolve("gar/hyde/gpt4/nv", output=Path("results")).system
        'gar-hyde-gpt4-nv'
        """
        text = str(spec)
        path = Path(text).expanduser()
        if path.is_file():
            return cls(system or path.parent.name or path.stem, file=path)
        if path.is_dir():
            return cls(system or _system_of(path, output), directory=path)
        try:
            where = SystemPath.parse(text)
        except UsageError:
            if "/" in text or "\\" in text:
                raise MissingResourceError(f"--run {text}: no such file or directory") from None
            where = SystemPath.base(text)
        return cls(system or _name_of(where), directory=where.directory(output))

    def path_for(self, dataset: str) -> Path:
        """The run file of ``dataset``: the file, or the first of ``<Dataset>.run|.trec|.jsonl|.txt`` (old names too)."""
        if self.file is not None:
            return self.file
        assert self.directory is not None
        names = [dataset, *_old_names(dataset)]
        tried = [self.directory / f"{name}{suffix}" for name in names for suffix in RUN_SUFFIXES]
        for candidate in tried:
            if candidate.is_file():
                return candidate
        raise MissingResourceError(
            f"no first-stage run for {dataset} in {self.directory} (looked for {', '.join(p.name for p in tried[:4])}, ...); "
            f"make one with: r2med run --retriever {self.system} --tasks {dataset}"
        )

    def load(self, dataset: str) -> Run:
        """The first-stage run of ``dataset`` (read with file:line validation)."""
        return read_run(self.path_for(dataset))


def _old_names(dataset: str) -> list[str]:
    from r2med.datasets.catalog import catalog

    return list(catalog().get(dataset).aliases) if dataset in catalog() else []


def _name_of(where: SystemPath) -> str:
    if where.kind == BASE:
        return where.system
    return "-".join(where.parts)


def _system_of(path: Path, output: Path) -> str:
    try:
        relative = path.resolve().relative_to(Path(output).resolve())
        return _name_of(SystemPath.parse(relative.as_posix()))
    except (ValueError, UsageError):
        return path.resolve().name


def rerank_results(
    reranker: Reranker,
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    first_stage: FirstStage | Callable[[str], Run],
    *,
    output: Path,
    system: str | None = None,
    top_k: int = 100,
    truncate: bool = False,
    ignore_identical_ids: bool = False,
    resume: bool = True,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Rerank every dataset's first-stage run, evaluate it, store it under ``reranker/<name>/<system>/top_<k>/``.

    One dataset at a time, each complete on disk (with its manifest) before the next starts; with
    ``resume`` a stored result made by the same reranker, options, first-stage run and data is reused.
    ``datasets`` may hold loaders (zero-argument callables); ``first_stage`` is a ``FirstStage`` or a
    function ``dataset name -> Run``; ``system`` names the first stage (default: ``first_stage.system``).
    ``truncate`` keeps only the reranked ``top_k`` per query, as the official reranker runs did (their
    recall@100 equals recall@10 at top 10); by default the rest follow in their first-stage order.
    """
    from r2med.pipeline import run_system

    check_top_k(top_k)
    if system is None:
        if not isinstance(first_stage, FirstStage):
            raise UsageError("rerank_results needs system= when first_stage is a function")
        system = first_stage.system
    load = first_stage.load if isinstance(first_stage, FirstStage) else first_stage
    where = SystemPath.rerank(reranker.name, system, top_k)
    runs: dict[str, Run] = {}

    def first(dataset: Dataset) -> Run:
        if dataset.name not in runs:
            runs.clear()  # one dataset's run in memory at a time
            runs[dataset.name] = load(dataset.name)
        return runs[dataset.name]

    def config_of(dataset: Dataset) -> dict[str, Any]:
        return {"reranker": describe(reranker), "top_k": top_k, "truncate": truncate,
                "first_stage": {"system": system, "run_sha256": run_digest(first(dataset))}}

    def search(dataset: Dataset) -> Run:
        reranked = reranker.rerank(dataset.queries, dataset.corpus, first(dataset), top_k=top_k)
        if truncate:
            reranked = reranked.top_k(top_k)
        log = getattr(reranker, "window_log", None)
        if log:
            _write_window_log(where.directory(output) / f"{dataset.name}.windows.jsonl", log)
        return reranked

    def details_of(dataset: Dataset) -> dict[str, Any]:
        stats = getattr(reranker, "last_stats", None)
        return {"reranker_stats": stats.__dict__ if stats is not None else None}

    return run_system(where, search, datasets, output=output, ignore_identical_ids=ignore_identical_ids,
                      config_of=config_of, details_of=details_of, resume=resume, on_result=on_result)


def _write_window_log(path: Path, log: list[dict[str, Any]]) -> None:
    def body(handle: IO[str]) -> None:
        for entry in log:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    write_atomic(path, body)
