"""The stage model: every command is a pipeline of stages run by one runner.

A stage (:class:`~r2med.stages.base.Stage`) knows where its results live (its ``SystemPath``), the
configuration that keys a stored result, and how to make one dataset's ``Run``. The runner
(:func:`~r2med.stages.runner.run_stage`) does everything else for every stage alike: reuse a stored
result made by the same configuration on the same data, evaluate, write the result set in the official
layout and its manifest.

- :class:`~r2med.stages.retrieve.Retrieve`: a retriever, plain or with an expansion (GAR);
- :class:`~r2med.stages.fuse.Fuse`: the stored runs of earlier stages fused into one;
- :class:`~r2med.stages.rerank.Rerank`: an earlier stage's stored runs reranked;
- :class:`~r2med.stages.agent.Agent`: an agentic search loop (Search-R1, Search-o1); its run is the agent's own
  ranking, and it writes the agent's expansion file and trajectories.

A file stage (:class:`~r2med.stages.base.FileStage`) makes files instead of a run; the runner
(:func:`~r2med.stages.runner.run_file_stage`) stores them with their manifest and keeps them in the same way:

- :class:`~r2med.stages.expand.Expand`: an LLM's GAR expansions (``r2med expand``), the official
  ``query_with_hydoc.jsonl``.

``r2med.pipeline.run_pipeline(spec)`` builds the stages a ``PipelineSpec`` names and runs them in order.
Importing this package imports no heavy dependency.
"""

from typing import Any

from r2med.stages.agent import Agent
from r2med.stages.base import DatasetResult, FileStage, Product, ProductResult, Stage, summarise
from r2med.stages.fuse import Fuse
from r2med.stages.rerank import FirstStage, Rerank
from r2med.stages.retrieve import Expansion, Retrieve
from r2med.stages.runner import run_file_stage, run_stage

__all__ = ["Agent", "DatasetResult", "Expand", "Expansion", "FileStage", "FirstStage", "Fuse", "Product", "ProductResult",
           "Rerank", "Retrieve", "Stage", "expand_dataset", "run_file_stage", "run_stage", "summarise"]


def __getattr__(name: str) -> Any:
    """``Expand`` and ``expand_dataset``, imported when first used: they bring in the LLM client, which a run
    without an expansion to generate never needs."""
    if name in ("Expand", "expand_dataset"):
        from r2med.stages import expand

        return getattr(expand, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
