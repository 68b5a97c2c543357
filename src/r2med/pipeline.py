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
    from r2med.config import FusionSpec, PipelineSpec
    from r2med.expansion.apply import PreparedQueries

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetResult:
    dataset: str
    scores: Scores
    files: ResultFiles
    seconds: float
    reused: bool = False


def _stored_result(files: ResultFiles) -> Scores:
    """The scores of a stored result: 5-decimal means from its JSON, per-query values from its JSONL."""
    import json

    from r2med.store.results import read_result

    per_query = {}
    with files.per_query.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                per_query[row.pop("qid")] = row
    return Scores(dict(read_result(files.result)["test"]), per_query)


def reusable(files: ResultFiles, config: dict) -> bool:
    """Whether a complete stored result was made by exactly ``config`` (its manifest's hash)."""
    from r2med.manifest import config_sha256, read_manifest

    if not (files.result.is_file() and files.run.is_file() and files.per_query.is_file()):
        return False
    manifest = read_manifest(files.result)
    return manifest is not None and manifest.get("config_sha256") == config_sha256(config)


def run_system(
    where: SystemPath,
    search: Callable[[Dataset], Run],
    datasets: Iterable[Dataset | Callable[[], Dataset]],
    *,
    output: Path,
    ignore_identical_ids: bool = False,
    config_of: Callable[[Dataset], dict] | None = None,
    details_of: Callable[[Dataset], dict] | None = None,
    resume: bool = True,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Search, evaluate and store one system on each dataset, one at a time.

    ``search(dataset)`` returns the system's run. ``datasets`` may hold loaders (zero-argument
    callables) so that a dataset is read only when its turn comes and a bad one fails after the
    earlier ones were written. Each dataset's files are complete on disk before the next starts,
    the manifest (``<Dataset>.manifest.json``) last. ``config_of(dataset)`` describes everything that
    determines the run; with ``resume`` a stored result whose manifest has the same configuration
    (and dataset files) is reused instead of recomputed. ``details_of(dataset)`` adds facts known
    after the search (LLM usage, fallbacks) to the manifest.
    """
    from r2med.manifest import build_manifest, write_manifest
    from r2med.store.results import result_files

    results = []
    for item in datasets:
        start = time.perf_counter()
        dataset = item() if callable(item) else item
        config = {
            "system": str(where),
            **(config_of(dataset) if config_of is not None else {}),
            "ignore_identical_ids": ignore_identical_ids,
            "dataset": {"name": dataset.name, "revision": dataset.revision, "sha256": dict(dataset.sha256)},
        }
        files = result_files(output, where, dataset.name)
        if resume and reusable(files, config):
            logger.info("%s: reusing the stored result %s (same configuration and data)", dataset.name, files.result)
            result = DatasetResult(dataset.name, _stored_result(files), files, 0.0, reused=True)
        else:
            run = search(dataset)
            searched = time.perf_counter()
            scores = evaluate(dataset.qrels, run, ignore_identical_ids=ignore_identical_ids)
            seconds = time.perf_counter() - start
            files = write_result(output, where, dataset.name, scores, run, seconds=seconds)
            timings = {"search": searched - start, "evaluate": time.perf_counter() - searched, "total": seconds}
            details = details_of(dataset) if details_of is not None else {}
            write_manifest(files.result, build_manifest(system=str(where), dataset=dataset, config=config,
                                                        timings=timings, details=details))
            logger.info("%s: nDCG@10 %.5f (%d queries) -> %s", dataset.name, scores.aggregate["ndcg_at_10"],
                        scores.n_queries, files.result)
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
    resume: bool = True,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """A base retriever on each dataset; results under ``<output>/base retriever/<name>/``."""
    return run_system(
        SystemPath.base(retriever.name), lambda dataset: retriever.retrieve(dataset, top_k=top_k), datasets,
        output=output, ignore_identical_ids=retriever.ignore_identical_ids,
        config_of=lambda dataset: {"retriever": _describe(retriever, dataset), "top_k": top_k},
        resume=resume, on_result=on_result,
    )


def _describe(retriever: Retriever, dataset: Dataset) -> dict:
    describe = getattr(retriever, "describe", None)
    return describe(dataset.name) if describe is not None else {"retriever": retriever.name}


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
    resume: bool = True,
    on_prepared: Callable[[Dataset, PreparedQueries], None] | None = None,
    on_result: Callable[[DatasetResult], None] | None = None,
) -> list[DatasetResult]:
    """Generation-augmented retrieval with ``method``/``llm``'s expansions (published or generated).

    Results go to ``<output>/gar/<method>/<llm>/<retriever>/``; a non-default BM25 ``composition``
    (``query2doc-spaced``) is stored under its own name in place of the method.
    """
    from r2med.datasets.readers import file_sha256
    from r2med.expansion.apply import prepare_queries
    from r2med.expansion.published import find_expansions, read_expansions

    prepared_of: dict[str, PreparedQueries] = {}

    path_of: dict[str, Path] = {}  # found once per dataset (config_of runs first), used by search

    def config_of(dataset: Dataset) -> dict:
        path = path_of[dataset.name] = find_expansions(dataset, method, llm, settings=settings)
        return {
            "retriever": _describe(retriever, dataset), "top_k": top_k,
            "expansion": {"method": method, "llm": llm, "file": str(path), "sha256": file_sha256(path),
                          "answer_policy": policy, "bm25_composition": composition},
        }

    def search(dataset: Dataset) -> Run:
        path = path_of.get(dataset.name) or find_expansions(dataset, method, llm, settings=settings)
        prepared = prepare_queries(dataset, read_expansions(path, method=method, llm=llm), policy=policy)
        prepared_of[dataset.name] = prepared
        if on_prepared is not None:
            on_prepared(dataset, prepared)
        return retriever.retrieve_expanded(dataset, prepared, top_k=top_k, composition=composition)

    def details_of(dataset: Dataset) -> dict:
        prepared = prepared_of.get(dataset.name)
        if prepared is None:
            return {}
        return {"expansion": {**prepared.summary(), "style": prepared.style,
                              "fell_back_ids": prepared.fell_back[:100], "truncated_ids": prepared.truncated[:100]}}

    where = SystemPath.gar(composition or method, llm, retriever.name)
    return run_system(where, search, datasets, output=output, ignore_identical_ids=retriever.ignore_identical_ids,
                      config_of=config_of, details_of=details_of, resume=resume, on_result=on_result)


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


def run_pipeline(
    spec: PipelineSpec,
    *,
    settings: Settings | None = None,
    progress: bool = True,
    resume: bool = True,
    on_result: Callable[[str, DatasetResult], None] | None = None,
) -> dict[str, list[DatasetResult]]:
    """Run every stage of ``spec``: each retriever (with the expansion, if any), then the fusion.

    Every stage reads from and writes to the store (``spec.output``): with ``resume`` a stage whose
    stored result has the same configuration and data is not recomputed, and the fusion reads its
    inputs' stored runs, so rerunning an interrupted or changed pipeline recomputes only what is new.
    Returns ``{system path: [DatasetResult per dataset]}`` in stage order.
    """
    from r2med.datasets import load_dataset, locate
    from r2med.expansion.published import parse_expansion_spec
    from r2med.retrievers.registry import make_retriever
    from r2med.settings import get_settings

    settings = settings or get_settings()
    targets = locate(list(spec.datasets) if spec.datasets else None, data_dir=spec.data_dir, settings=settings)
    loaded: dict[str, Dataset] = {}

    def loader(name: str, path: Path | None) -> Callable[[], Dataset]:
        def load() -> Dataset:
            if name not in loaded:
                loaded[name] = load_dataset(name, path=path, settings=settings)
            return loaded[name]
        return load

    loaders = [loader(name, path) for name, path in targets]
    stages: dict[str, list[DatasetResult]] = {}
    inputs: list[tuple[SystemPath, bool]] = []
    for rspec in spec.retrievers:
        retriever = make_retriever(rspec, cache_dir=settings.home, progress=progress)
        if spec.expansion:
            method, llm = parse_expansion_spec(spec.expansion)
            where = SystemPath.gar(method, llm, retriever.name)
            report = (lambda r, w=str(where): on_result(w, r)) if on_result else None
            results = run_gar(retriever, loaders, method=method, llm=llm, output=spec.output, top_k=spec.top_k,
                              policy=spec.answer_policy, settings=settings, resume=resume, on_result=report)
        else:
            where = SystemPath.base(retriever.name)
            report = (lambda r, w=str(where): on_result(w, r)) if on_result else None
            results = run_retriever(retriever, loaders, output=spec.output, top_k=spec.top_k, resume=resume,
                                    on_result=report)
        stages[str(where)] = results
        inputs.append((where, retriever.ignore_identical_ids))
    if spec.fusion is not None:
        where = SystemPath.fusion(spec.name or "+".join(w.system for w, _ in inputs))
        stages[str(where)] = _run_fusion(spec, spec.fusion, where, inputs, loaders, resume=resume, on_result=on_result)
    return stages


def _run_fusion(
    spec: PipelineSpec,
    fusion: FusionSpec,
    where: SystemPath,
    inputs: list[tuple[SystemPath, bool]],
    loaders: list[Callable[[], Dataset]],
    *,
    resume: bool,
    on_result: Callable[[str, DatasetResult], None] | None,
) -> list[DatasetResult]:
    """Fuse the stored runs of ``inputs`` per dataset (their manifests' hashes key the fused result)."""
    from r2med.fusion import fuse
    from r2med.manifest import read_manifest
    from r2med.store.results import result_files
    from r2med.store.runs import read_run

    def config_of(dataset: Dataset) -> dict:
        hashes = []
        for system, _ in inputs:
            manifest = read_manifest(result_files(spec.output, system, dataset.name).result) or {}
            hashes.append({"system": str(system), "config_sha256": manifest.get("config_sha256")})
        return {"fusion": {"method": fusion.method, **fusion.options}, "inputs": hashes, "top_k": spec.top_k}

    def search(dataset: Dataset) -> Run:
        runs = [read_run(result_files(spec.output, system, dataset.name).run) for system, _ in inputs]
        return fuse(runs, fusion.method, depth=spec.top_k, **fusion.options)

    report = (lambda r: on_result(str(where), r)) if on_result else None
    # the inputs' own rules already shaped their runs; a query's own id is dropped if any input dropped it
    drop = any(flag for _, flag in inputs)
    return run_system(where, search, loaders, output=spec.output, ignore_identical_ids=drop, config_of=config_of,
                      resume=resume, on_result=report)
