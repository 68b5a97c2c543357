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

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from r2med.config import PipelineSpec, RerankSpec
from r2med.datasets import dataset_loaders
from r2med.errors import UsageError
from r2med.io.dirs import check_output_dir, usable_cache_dir
from r2med.io.lock import DirectoryLock
from r2med.options import Runtime, key_of
from r2med.settings import Settings, get_settings
from r2med.stages.base import DatasetResult, Stage
from r2med.stages.rerank import FirstStage
from r2med.stages.runner import run_stage
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
    _check_llms(spec, client)
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
        first = FirstStage.resolve(spec.first_stage, output=spec.output, system=spec.first_stage_system,
                                   data_dir=spec.data_dir)
        if first.file is not None and len(named) != 1:
            raise UsageError(f"--run {spec.first_stage} is one run file; name its dataset with --tasks "
                             f"(got {len(named)} datasets)")
        for name, _ in named:  # fail before any work when a first-stage run is missing
            first.path_for(name)
    elif spec.agent is not None:
        from r2med.retrievers.registry import make_retriever
        from r2med.stages.agent import Agent

        knowledge = None
        if spec.agent.knowledge_dir is not None:
            from r2med.datasets.local import load_corpus

            knowledge = load_corpus(spec.agent.knowledge_dir)
        search = spec.agent.search_with
        configs = spec.agent.config.seeded()  # one run per seed of --seeds/--runs
        if len(configs) > 1 and spec.reranker is not None:
            raise UsageError("--seeds/--runs stores one agent run per seed; rerank each stored run separately")
        if isinstance(search, str):  # a retrieval server (r2med.agent.remote)
            from r2med.agent.remote import ServerSearch

            if knowledge is not None:
                raise UsageError(f"--search-with {search} searches the server's corpus; drop --knowledge-dir")
            config = spec.agent.config
            searcher: Any = ServerSearch(search, timeout=config.timeout, max_retries=config.max_retries)
            key = None
        else:
            searcher, key = make_retriever(search, cache_dir=cache_dir, progress=progress), search.key()
        for config in configs:
            agent = Agent(config, searcher, knowledge=knowledge, settings=settings, top_k=spec.top_k, client=client,
                          progress=progress, search_key=key)
            first = FirstStage.resolve(str(run(agent)), output=spec.output)
    else:
        from r2med.retrievers.registry import make_retriever
        from r2med.stages.retrieve import Expansion, Retrieve

        expansion = (Expansion.parse(spec.expansion, policy=spec.answer_policy, composition=spec.bm25_composition)
                     if spec.expansion else None)
        inputs: list[tuple[SystemPath, bool]] = []
        # one retriever, no fusion: the spec's name names the retriever's results (two local models in folders
        # of the same name would otherwise share them)
        single = spec.name if len(spec.retrievers) == 1 and spec.fusion is None else None
        for rspec in spec.retrievers:
            stage = Retrieve(make_retriever(rspec, cache_dir=cache_dir, progress=progress), top_k=spec.top_k,
                             expansion=expansion, settings=settings, system=single, key=rspec.key())
            inputs.append((run(stage), stage.ignore_identical_ids))
            del stage  # one retriever (model) in memory at a time
        last = inputs[-1][0]
        if spec.fusion is not None:
            from r2med.stages.fuse import Fuse

            name = spec.name or "+".join(where.system for where, _ in inputs)
            last = run(Fuse(name, inputs, method=spec.fusion.method, options=spec.fusion.options, output=spec.output,
                            top_k=spec.top_k))
        first = FirstStage.resolve(str(last), output=spec.output)
    if spec.reranker is not None:
        from r2med.rerankers.registry import make_reranker
        from r2med.stages.rerank import Rerank

        rerank = spec.reranker
        reranker = make_reranker(rerank.name, rerank.options, Runtime(cache_dir, progress))
        run(Rerank(reranker, first, top_k=rerank.top_k, truncate=rerank.truncate,
                   ignore_identical_ids=rerank.identical_ids == "drop", key=reranker_key(rerank)))
    return results


def run(
    retriever: Any = "bm25",
    *,
    data_dir: str | os.PathLike[str] | None = None,
    datasets: Sequence[str] | None = None,
    output: str | os.PathLike[str] = "results",
    name: str | None = None,
    cache_key: str | None = None,
    top_k: int = 100,
    batch_size: int | None = None,
    query_instruction: str | None = None,
    doc_instruction: str | None = None,
    identical_ids: str | None = None,
    expansion: str | None = None,
    answer_policy: str = "fallback",
    reranker: str | None = None,
    rerank_top_k: int = 100,
    cache: bool = True,
    resume: bool = True,
    progress: bool = True,
    settings: Settings | None = None,
) -> dict[str, dict[str, float]]:
    """``r2med run`` from Python: run ``retriever`` on the datasets, store, evaluate and return the last stage's table
    ``{"<Dataset>": {"ndcg_at_10": ..., ...}, ..., "average": {...}}`` (metrics as fractions, 5 decimals).

    ``retriever``: what ``r2med run --retriever`` takes (``"bm25"``, a zoo name, a model directory or hub id,
    ``"openai:MODEL"``), or your model as a Python object: an ``r2med.Encoder`` (``encode(texts, *, kind,
    instruction)`` and a ``cache_key``) or an MTEB-style object (``encode(sentences, **kwargs)``, with
    ``cache_key=``). A Python model is searched as the dense models are (cosine, BEIR's ``ignore_identical_ids``
    unless ``identical_ids="keep"``); its embeddings are cached under R2MED_HOME by its cache key, instructions
    and texts, and its results go to ``<output>/base retriever/<name>/`` (``name`` defaults to the cache key).
    ``datasets``: a name or names (default: the 8 from the hub, or every dataset under ``data_dir``); ``expansion``:
    ``METHOD/LLM`` for generation-augmented retrieval; ``reranker``: what ``r2med rerank --reranker`` takes.
    With ``resume`` a stored result with the same configuration and data is reused, never recomputed.
    """
    from r2med.retrievers.registry import RetrieverSpec

    given = {key: value for key, value in (("batch_size", batch_size), ("query_instruction", query_instruction),
                                           ("doc_instruction", doc_instruction)) if value is not None}
    if isinstance(retriever, (str, os.PathLike)):
        if cache_key is not None:
            raise UsageError(f"cache_key is for a Python model object; {os.fspath(retriever)!r} has its own")
        spec = RetrieverSpec.parse(os.fspath(retriever), given=given, identical_ids=identical_ids)
    else:
        from r2med.retrievers.dense.python_encoder import PythonEncoder, system_folder

        encoder = PythonEncoder(retriever, cache_key=cache_key, batch_size=batch_size)
        system = name or system_folder(encoder.key)
        spec = RetrieverSpec(system, given, identical_ids, encoder=encoder)
    pipeline = PipelineSpec(
        retrievers=(spec,), name=name, datasets=(datasets,) if isinstance(datasets, str) else tuple(datasets or ()) or None,
        data_dir=Path(data_dir) if data_dir is not None else None, output=Path(output), top_k=top_k,
        expansion=expansion, answer_policy=answer_policy, cache=cache,
        reranker=RerankSpec(reranker, top_k=rerank_top_k) if reranker else None,
    )
    from r2med.stages import summarise

    stages = run_pipeline(pipeline, settings=settings, progress=progress, resume=resume)
    return summarise(list(stages.values())[-1])


def _reranker_options(rerank: RerankSpec) -> Any:
    from r2med.rerankers.registry import options_for

    options = rerank.options
    return options_for(rerank.name, options) if options is None or isinstance(options, dict) else options


def _check_llms(spec: PipelineSpec, client: Any) -> None:
    """An LLM stage (the listwise reranker, the agent) with no model or an unset ``--api-key-env`` variable fails
    before any work, not after the first stages ran."""
    from r2med.llm.endpoint import LLMOptions

    if spec.agent is not None and client is None:
        spec.agent.config.ready()
    if spec.reranker is not None:
        options = _reranker_options(spec.reranker)
        if isinstance(options, LLMOptions):
            options.ready()


def reranker_key(rerank: RerankSpec) -> dict[str, Any]:
    """What keys a reranked result besides the reranker's own description: its kind, canonical name and declared
    options (``mono`` and ``monobert`` are one reranker, and one stored result)."""
    from r2med.rerankers.registry import resolve_reranker

    found = resolve_reranker(rerank.name)
    return {"kind": found.kind, "name": found.name, "options": key_of(_reranker_options(rerank))}
