"""``run_pipeline(spec)``: build the stages a ``PipelineSpec`` names and run them in order.

First stage: each retriever (plain or with the spec's expansion), stored runs (``first_stage``) or an agentic
search loop (``agent``: its own ranking, besides its expansion file and trajectories);
then the fusion of the retrievers' runs (``spec.fusion``); then the reranking of the last stage's runs
(``spec.reranker``). Every stage goes through the one runner (``r2med.stages.run_stage``): it reads from
and writes to the store (``spec.output``), so rerunning an interrupted or changed pipeline recomputes only
what is new. The whole pipeline holds the lock of ``spec.output`` (taken when the first dataset is loaded), so
no other r2med process changes a stage's stored result before a later stage reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2med.config import PipelineSpec
from r2med.datasets import dataset_loaders
from r2med.errors import UsageError
from r2med.io.dirs import check_output_dir, usable_cache_dir
from r2med.io.lock import DirectoryLock
from r2med.settings import Settings, get_settings
from r2med.stages import Agent, DatasetResult, FirstStage, Fuse, Rerank, Retrieve, Stage, run_stage
from r2med.stages.retrieve import Expansion
from r2med.store.results import SystemPath


def run_pipeline(
    spec: PipelineSpec,
    *,
    settings: Settings | None = None,
    progress: bool = True,
    resume: bool = True,
    on_result: Callable[[str, DatasetResult], None] | None = None,
    client: Any = None,
) -> dict[str, list[DatasetResult]]:
    """Run every stage of ``spec``; returns ``{system path: [DatasetResult per dataset]}`` in stage order.

    With ``resume`` a stage whose stored result has the same configuration and data is not recomputed;
    ``progress`` shows progress bars; ``on_result(system path, result)`` is called after each dataset;
    ``client``: the chat client an agent stage uses (default: one for its config).
    """
    settings = settings or get_settings()
    check_output_dir(spec.output)  # a file, under a file or unwritable: an error now, not after the work
    cache_dir = usable_cache_dir(settings.home) if spec.cache else None
    n_stages = max(len(spec.retrievers), 1) + (spec.fusion is not None) + (spec.reranker is not None)
    named = dataset_loaders(list(spec.datasets) if spec.datasets else None, data_dir=spec.data_dir, settings=settings,
                            keep=n_stages > 1)
    loaders = [load for _, load in named]
    with DirectoryLock(spec.output) as lock:
        return _run(spec, named, loaders, lock, settings=settings, cache_dir=cache_dir, progress=progress,
                    resume=resume, on_result=on_result, client=client)


def _run(spec: PipelineSpec, named: list, loaders: list, lock: DirectoryLock, *, settings: Settings,
         cache_dir: Path | None, progress: bool, resume: bool,
         on_result: Callable[[str, DatasetResult], None] | None, client: Any) -> dict[str, list[DatasetResult]]:
    results: dict[str, list[DatasetResult]] = {}

    def run(stage: Stage) -> SystemPath:
        report = (lambda result, where=str(stage.where): on_result(where, result)) if on_result else None
        results[str(stage.where)] = run_stage(stage, loaders, output=spec.output, resume=resume, on_result=report,
                                              lock=lock)
        return stage.where

    if spec.first_stage is not None:
        first = FirstStage.resolve(spec.first_stage, output=spec.output, system=spec.first_stage_system)
        if first.file is not None and len(named) != 1:
            raise UsageError(f"--run {spec.first_stage} is one run file; name its dataset with --tasks "
                             f"(got {len(named)} datasets)")
        for name, _ in named:  # fail before any work when a first-stage run is missing
            first.path_for(name)
    elif spec.agent is not None:
        from r2med.retrievers.registry import make_retriever

        knowledge = None
        if spec.agent.knowledge_dir is not None:
            from r2med.datasets.local import load_corpus

            knowledge = load_corpus(spec.agent.knowledge_dir)
        agent = Agent(spec.agent.config, make_retriever(spec.agent.search_with, cache_dir=cache_dir, progress=progress),
                      knowledge=knowledge, settings=settings, top_k=spec.top_k, client=client, progress=progress)
        first = FirstStage.resolve(str(run(agent)), output=spec.output)
    else:
        from r2med.retrievers.registry import make_retriever

        expansion = (Expansion.parse(spec.expansion, policy=spec.answer_policy, composition=spec.bm25_composition)
                     if spec.expansion else None)
        inputs: list[tuple[SystemPath, bool]] = []
        # one retriever, no fusion: the spec's name names the retriever's results (two local models in folders
        # of the same name would otherwise share them)
        single = spec.name if len(spec.retrievers) == 1 and spec.fusion is None else None
        for rspec in spec.retrievers:
            stage = Retrieve(make_retriever(rspec, cache_dir=cache_dir, progress=progress), top_k=spec.top_k,
                             expansion=expansion, settings=settings, system=single)
            inputs.append((run(stage), stage.ignore_identical_ids))
            del stage  # one retriever (model) in memory at a time
        last = inputs[-1][0]
        if spec.fusion is not None:
            name = spec.name or "+".join(where.system for where, _ in inputs)
            last = run(Fuse(name, inputs, method=spec.fusion.method, options=spec.fusion.options, output=spec.output,
                            top_k=spec.top_k))
        first = FirstStage.resolve(str(last), output=spec.output)
    if spec.reranker is not None:
        from r2med.rerankers.registry import make_reranker

        rerank = spec.reranker
        reranker = make_reranker(rerank.name, dataclasses.replace(rerank.options, cache_dir=cache_dir, progress=progress))
        run(Rerank(reranker, first, top_k=rerank.top_k, truncate=rerank.truncate,
                   ignore_identical_ids=rerank.identical_ids == "drop"))
    return results
