"""Retrievers by name: each entry builds a ``Retriever`` from the run options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from r2med.registry import Registry
from r2med.retrievers.base import Retriever


@dataclass(frozen=True)
class RetrieverOptions:
    """Options of ``r2med run`` that retrievers may read."""

    cache_dir: Path | None
    progress: bool = True
    bm25_variant: str = "r2med"
    k1: float = 0.9
    b: float = 0.4


def _bm25(options: RetrieverOptions) -> Retriever:
    from r2med.retrievers.bm25.retriever import BM25Retriever

    cache = options.cache_dir / "bm25" if options.cache_dir is not None else None
    return BM25Retriever(variant=options.bm25_variant, k1=options.k1, b=options.b, cache_dir=cache, progress=options.progress)


RETRIEVERS: Registry[Callable[[RetrieverOptions], Retriever]] = Registry("retriever", {"bm25": _bm25})


def make_retriever(name: str, options: RetrieverOptions) -> Retriever:
    """Build the retriever called ``name``; unknown names fail with the valid list and a suggestion."""
    return RETRIEVERS.get(name)(options)
