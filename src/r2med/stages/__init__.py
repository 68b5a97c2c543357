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
Importing this package imports none of them: each name loads its module when first used (``r2med.lazy``).
"""

from typing import TYPE_CHECKING

from r2med.lazy import lazy_exports

if TYPE_CHECKING:
    from r2med.stages.agent import Agent
    from r2med.stages.base import DatasetResult, FileStage, Product, ProductResult, Stage, summarise
    from r2med.stages.expand import Expand, expand_dataset
    from r2med.stages.fuse import Fuse
    from r2med.stages.rerank import FirstStage, Rerank
    from r2med.stages.retrieve import Expansion, Retrieve
    from r2med.stages.runner import run_file_stage, run_stage

#: each name's module, imported when the name is first used: a BM25 run needs neither the agent stage (the agent
#: loop's configuration), nor the fusion, nor the expansion stage (the LLM client)
_EXPORTS = {
    "Agent": "r2med.stages.agent", "Expand": "r2med.stages.expand", "expand_dataset": "r2med.stages.expand",
    "Fuse": "r2med.stages.fuse", "FirstStage": "r2med.stages.rerank", "Rerank": "r2med.stages.rerank",
    "Expansion": "r2med.stages.retrieve", "Retrieve": "r2med.stages.retrieve",
    "run_file_stage": "r2med.stages.runner", "run_stage": "r2med.stages.runner",
    **dict.fromkeys(("DatasetResult", "FileStage", "Product", "ProductResult", "Stage", "summarise"),
                    "r2med.stages.base"),
}

__all__ = ["Agent", "DatasetResult", "Expand", "Expansion", "FileStage", "FirstStage", "Fuse", "Product",
           "ProductResult", "Rerank", "Retrieve", "Stage", "expand_dataset", "run_file_stage", "run_stage", "summarise"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
