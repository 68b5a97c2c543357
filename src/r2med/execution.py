"""``execute(plan)``: the stages a :class:`~r2med.planning.Plan` names, built one at a time and run in order.

:func:`r2med.planning.plan` resolves and checks a ``PipelineSpec`` before any work; :func:`execute` then builds each
planned stage (``PlannedStage.build(ctx)``, ctx a :class:`BuildContext`: a retriever, the agent; the fusion and the
reranker from the spec) and runs it through the one runner (``r2med.stages.run_stage``), holding the output
directory's lock for the whole pipeline. ``r2med.pipeline.run_pipeline(spec)`` is ``execute(plan(spec))``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2med.config import PipelineSpec
from r2med.errors import UsageError
from r2med.options import Runtime
from r2med.planning import Plan, PlannedStage, reranker_key
from r2med.settings import Settings, get_settings
from r2med.store.results import SystemPath


@dataclass
class BuildContext:
    """What building a stage needs at execution (``PlannedStage.build(ctx)``): the plan, where caches go, progress,
    the agent's client."""

    plan: Plan
    spec: PipelineSpec
    settings: Settings
    cache_dir: Path | None
    progress: bool
    client: Any
    single: bool = False
    search_key: dict[str, Any] | None = None
    _searcher: Any = None
    _knowledge: Any = False

    def searcher(self) -> Any:
        """The agent's searcher, built once for every seed (a retriever, or a retrieval server's client)."""
        if self._searcher is None:
            search = self.spec.agent.search_with  # type: ignore[union-attr]
            if isinstance(search, str):
                from r2med.agent.remote import ServerSearch

                config = self.spec.agent.config  # type: ignore[union-attr]
                self._searcher = ServerSearch(search, timeout=config.timeout, max_retries=config.max_retries)
            else:
                from r2med.retrievers.registry import make_retriever

                self._searcher = make_retriever(search, cache_dir=self.cache_dir, progress=self.progress)
                self.search_key = search.key()
        return self._searcher

    def knowledge(self) -> Any:
        if self._knowledge is False:
            self._knowledge = None
            if self.plan.extra.get("knowledge") is not None:
                from r2med.datasets.local import load_corpus

                self._knowledge = load_corpus(self.plan.extra["knowledge"])
        return self._knowledge


def execute(plan: Plan, *, progress: bool = True, resume: bool = True,
            on_result: Callable[[str, Any], None] | None = None, client: Any = None) -> dict[str, list[Any]]:
    """Run the stages of ``plan`` in order; returns ``{system path: [DatasetResult per dataset]}``.

    With ``resume`` a stage whose stored result has the same configuration and data is not recomputed;
    ``progress`` shows progress bars; ``on_result(system path, result)`` is called after each dataset;
    ``client``: the chat client an agent stage uses (default: one for its config). The whole pipeline holds the
    lock of the output directory, so no other r2med process changes a stored result a later stage reads.
    """
    from r2med.datasets.loading import loaders_for
    from r2med.io.dirs import usable_cache_dir
    from r2med.io.lock import DirectoryLock

    spec = plan.spec
    if spec is None:
        raise UsageError("this plan has no pipeline to execute")
    settings = plan.settings or get_settings()
    cache_dir = usable_cache_dir(settings.home) if spec.cache else None
    n_stages = max(len(spec.retrievers), 1) + (spec.fusion is not None) + (spec.reranker is not None)
    loaders = [load for _, load in loaders_for(list(plan.datasets), settings=settings, keep=n_stages > 1)]
    ctx = BuildContext(plan, spec, settings, cache_dir, progress, client,
                   single=len(spec.retrievers) == 1 and spec.fusion is None and spec.name is not None)
    with DirectoryLock(spec.output) as lock:
        return _execute(plan, ctx, loaders, lock, resume=resume, on_result=on_result)


def _execute(plan: Plan, ctx: BuildContext, loaders: list, lock: Any, *, resume: bool,
             on_result: Callable[[str, Any], None] | None) -> dict[str, list[Any]]:
    from r2med.stages.runner import run_stage

    spec = ctx.spec
    results: dict[str, list[Any]] = {}

    def run(stage: Any, planned: PlannedStage) -> SystemPath:
        if str(stage.where) != planned.where:  # the plan said where its results go: the stage must agree
            raise AssertionError(f"planned {planned.where!r}, built {stage.where}")
        report = (lambda result, where=str(stage.where): on_result(where, result)) if on_result else None
        results[str(stage.where)] = run_stage(stage, loaders, output=spec.output, resume=resume, on_result=report,
                                              lock=lock)
        return stage.where

    retrieved: list[tuple[SystemPath, bool]] = []
    first: Any = None
    for planned in plan.stages:
        if planned.role == "first stage":
            from r2med.stages.rerank import FirstStage

            first = FirstStage.resolve(spec.first_stage, output=spec.output,  # type: ignore[arg-type]
                                       system=spec.first_stage_system, data_dir=spec.data_dir)
        elif planned.role in ("retrieve", "agent"):
            assert planned.build is not None
            stage = planned.build(ctx)
            where = run(stage, planned)
            retrieved.append((where, stage.ignore_identical_ids))
            del stage  # one retriever (model) in memory at a time
            first = where
        elif planned.role == "fuse":
            from r2med.stages.fuse import Fuse

            assert spec.fusion is not None
            where = SystemPath.parse(planned.where)
            first = run(Fuse(where.system, retrieved, method=spec.fusion.method, options=spec.fusion.options,
                             output=spec.output, top_k=spec.top_k), planned)
        elif planned.role == "rerank":
            from r2med.rerankers.registry import make_reranker
            from r2med.stages.rerank import FirstStage, Rerank

            rerank = spec.reranker
            assert rerank is not None
            if not isinstance(first, FirstStage):
                first = FirstStage.resolve(str(first), output=spec.output)
            reranker = make_reranker(rerank.name, rerank.options, Runtime(ctx.cache_dir, ctx.progress))
            run(Rerank(reranker, first, top_k=rerank.top_k, truncate=rerank.truncate,
                       ignore_identical_ids=rerank.identical_ids == "drop", key=reranker_key(rerank)), planned)
    return results
