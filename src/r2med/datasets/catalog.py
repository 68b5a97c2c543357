"""The catalog of the 8 R2MED datasets (package data ``r2med/data/datasets.json``).

>>> get_spec("stack-biology").name
'Biology'
>>> [s.name for s in resolve_names(["pmc-treat", "IIYiPatients-EN"])]
['PMC-Treatment', 'IIYi-Clinical']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from r2med.packaged import read_text
from r2med.registry import Registry

#: Files of one dataset, at the root of its hub repo and of the official local layout.
DATASET_FILES = ("corpus.jsonl", "query.jsonl", "qrels.jsonl")


@dataclass(frozen=True)
class DatasetSpec:
    """One R2MED dataset as published: hub repo, pinned revision, task and the paper's sizes."""

    name: str
    repo: str
    revision: str
    task: str
    queries: int
    documents: int
    avg_positives: float
    query_len: float
    doc_len: float
    aliases: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def _load() -> Registry[DatasetSpec]:
    raw = json.loads(read_text("datasets.json"))
    specs: dict[str, DatasetSpec] = {}
    aliases: dict[str, str] = {}
    for entry in raw["tasks"]:
        spec = DatasetSpec(**{**entry, "aliases": tuple(entry.get("aliases", ()))})
        specs[spec.name] = spec
        for alias in spec.aliases:
            aliases[alias] = spec.name
    return Registry("dataset", specs, aliases)


def catalog() -> Registry[DatasetSpec]:
    """The registry of the 8 datasets, in the paper's order."""
    return _load()


def dataset_names() -> list[str]:
    """The 8 public names in the paper's order."""
    return catalog().names()


def get_spec(name: str) -> DatasetSpec:
    """The spec of ``name`` (public name or old alias, any case); UsageError with a suggestion if unknown."""
    return catalog().get(name)


def resolve_names(names: list[str] | tuple[str, ...] | None) -> list[DatasetSpec]:
    """Specs for ``names``; ``None``, ``[]`` or ``["all"]`` mean all 8. Duplicates are dropped."""
    if not names or [n.strip().lower() for n in names] == ["all"]:
        return [catalog().get(n) for n in dataset_names()]
    seen: dict[str, DatasetSpec] = {}
    for name in names:
        spec = get_spec(name)
        seen.setdefault(spec.name, spec)
    return list(seen.values())


@lru_cache(maxsize=1)
def published_expansions() -> dict[str, tuple[str, ...]]:
    """The expansions the authors published in the hub repos, seen on the Biology dataset card: method -> LLMs
    (package data ``datasets.json``, ``expansions``; each is ``<method>/<llm>/query_with_hydoc.jsonl`` in the repo,
    the dataset config ``<method>``, split :func:`hub_split` of the LLM).

    >>> published_expansions()["search-o1"], "o3-mini" in published_expansions()["hyde"]
    (('qwq-32b', 'qwen3-32b'), True)
    """
    raw = json.loads(read_text("datasets.json"))
    return {method: tuple(llms) for method, llms in raw.get("expansions", {}).items()}


def hub_split(llm: str) -> str:
    """The split of an LLM's expansions in a hub dataset's config (``_`` where the folder has ``-``).

    >>> hub_split("o3-mini"), hub_split("qwen-3b-ins")
    ('o3_mini', 'qwen_3b_ins')
    """
    return llm.replace("-", "_")
