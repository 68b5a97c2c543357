"""``run_pipeline(spec)``: ``execute(plan(spec))``, the stages a ``PipelineSpec`` names, checked first, run in order.

First stage: each retriever (plain or with the spec's expansion), stored runs (``first_stage``) or an agentic
search loop (``agent``: its own ranking, besides its expansion file and trajectories);
then the fusion of the retrievers' runs (``spec.fusion``); then the reranking of the last stage's runs
(``spec.reranker``). Every stage goes through the one runner (``r2med.stages.run_stage``): it reads from
and writes to the store (``spec.output``), so rerunning an interrupted or changed pipeline recomputes only
what is new. Before any work the whole pipeline is resolved and checked (``r2med.planning``): a typo in the last
stage's name is reported before the first stage runs, with every other problem found. The whole pipeline holds the
lock of ``spec.output`` (taken when the first dataset is loaded), so no other r2med process changes a stage's
stored result before a later stage reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from r2med.config import PipelineSpec, RerankSpec
from r2med.errors import UsageError
from r2med.execution import execute
from r2med.planning import Plan, plan, reranker_key
from r2med.settings import Settings
from r2med.stages.base import DatasetResult

__all__ = ["Plan", "execute", "plan", "reranker_key", "run", "run_pipeline"]


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

    ``execute(plan(spec))`` (``r2med.planning``): every stage, name, option, file, endpoint, key and extra is resolved
    and checked first, every problem reported at once, before any work. With ``resume`` a stage whose stored result
    has the same configuration and data is not recomputed; ``progress`` shows progress bars; ``on_result(system
    path, result)`` is called after each dataset; ``client``: the chat client an agent stage uses (default: one for
    its config).
    """
    resolved = plan(spec, settings=settings, resume=resume, client=client)
    return execute(resolved, progress=progress, resume=resume, on_result=on_result, client=client)


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
