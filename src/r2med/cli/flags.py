"""The generated flags of the stage-running commands: each option comes from its component's declaration
(``r2med.options``); this module only says which components a command offers and under which flags.

A command's flag sets are built from the registries when its parser is built (a component's new option shows up
everywhere it is offered, and in ``docs/options.md``: ``r2med.cli.options_doc``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from r2med.options import Flags


def retriever_flags() -> list[Flags]:
    """Every retriever family's options (each class once): defaults for each ``--retriever`` of its family."""
    from r2med.retrievers.registry import retriever_option_classes

    titles = {"RetrieverOptions": "every retriever", "BM25Options": "BM25", "DenseOptions": "dense retrievers"}
    # ``system`` names one retriever (NAME:name=...), not every retriever of a command: no flag
    return [Flags(cls, title=titles.get(cls.__name__, cls.__name__), skip=("system",))
            for cls in retriever_option_classes()]


def reranker_flags(*, rename: dict[str, str] | None = None) -> list[Flags]:
    """Every reranker kind's options (each class once); ``rename``: option -> flag (``run``'s ``--rerank-batch-size``)."""
    from r2med.rerankers.registry import option_classes

    titles = {"PointwiseOptions": "pointwise reranker (cross-encoder, RankLLaMA)", "RankLlamaOptions": "RankLLaMA",
              "ListwiseOptions": "listwise reranker (an OpenAI-compatible chat server)",
              "ReasonRankOptions": "ReasonRank (reasonrank-7b/-32b/-8b: the flags above, and these)"}
    return [Flags(cls, rename=rename, title=titles.get(cls.__name__, cls.__name__)) for cls in option_classes()]


def add(parser: argparse.ArgumentParser, flag_sets: Sequence[Flags]) -> None:
    for flags in flag_sets:
        flags.add(parser)


def given(args: argparse.Namespace, flag_sets: Sequence[Flags]) -> dict[str, Any]:
    """The values the user gave for any of ``flag_sets``, by option name."""
    out: dict[str, Any] = {}
    for flags in flag_sets:
        out.update(flags.given(args))
    return out
