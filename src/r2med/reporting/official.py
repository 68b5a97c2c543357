"""The published numbers: all 71 systems of R2MED's results, as package data.

``r2med/data/official_results.json`` holds, per official path (``base retriever/bm25``,
``gar/hyde/gpt4/nv``, ``reranker/monobert/nv/top_10``, ...), each dataset's published test metrics.
The authors' files use two key styles (``ndcg_at_10`` and ``NDCG@10``); here every key is read
through ``normalise_metric`` so the rest of r2med only sees the official keys.

A published system's average is the mean of its 8 published per-dataset values (5 decimals, as
published). That reproduces the paper's table for every system, MedCPT included (7.87; the online
leaderboard's 9.02 has no per-dataset numbers behind it and is only quoted as a note).

>>> bm25 = published("base retriever/bm25")
>>> bm25.name, round(100 * bm25.values("ndcg_at_10")["Biology"], 3)
('BM25', 19.188)
>>> published("reranker/mono/top_10").path   # the official repository's own spelling
'reranker/monobert/nv/top_10'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from r2med.packaged import read_text
from r2med.registry import Registry
from r2med.store.results import BASE, OfficialTree, SystemPath

_FAMILY = {"ndcg": "ndcg_at", "map": "map_at", "p": "precision_at", "precision": "precision_at", "recall": "recall_at"}
_AT_RE = re.compile(r"^(ndcg|map|p|precision|recall)@(\d+)$")


@lru_cache(maxsize=256)  # the published results repeat 54 keys 11,576 times
def normalise_metric(key: str) -> str:
    """The official key (``ndcg_at_10``, ``precision_at_1``, ``mrr``) of a metric name in either style.

    >>> [normalise_metric(k) for k in ("NDCG@10", "P@1", "Recall@100", "MAP@25", "MRR", "ndcg_at_10", " nDCG@5 ")]
    ['ndcg_at_10', 'precision_at_1', 'recall_at_100', 'map_at_25', 'mrr', 'ndcg_at_10', 'ndcg_at_5']
    """
    name = key.strip().lower()
    match = _AT_RE.match(name)
    if match:
        return f"{_FAMILY[match.group(1)]}_{match.group(2)}"
    if name == "recip_rank":
        return "mrr"
    return name


def normalise_metrics(values: Mapping[str, object]) -> dict[str, float]:
    """The numeric entries of ``values`` under official keys (non-numbers are left out).

    >>> normalise_metrics({"NDCG@10": 0.5, "MRR": 1, "note": "x"})
    {'ndcg_at_10': 0.5, 'mrr': 1.0}
    """
    return {
        normalise_metric(k): float(v)  # type: ignore[arg-type]
        for k, v in values.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _label(table: Mapping[str, str], name: str) -> str:
    return table.get(name, name)


def display_name(path: str, labels: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """A readable name for a system path.

    >>> display_name("base retriever/nv"), display_name("gar/hyde/gpt4/bm25")
    ('NV-Embed-v2', 'HyDE (gpt4) + BM25')
    >>> display_name("reranker/monobert/nv/top_10"), display_name("my/own")
    ('monoBERT top-10 on NV-Embed-v2', 'my/own')

    An agent's own ranking (``agent/<style>/<llm>/<retriever it searched with>``, r2med's own) names the
    protocol, the LLM and the retriever, and says it is the agent's ranking, not a GAR run of its answers:

    >>> display_name("agent/search-r1/test-model/bm25")
    'Search-R1 (test-model) agent ranking, searching BM25'
    """
    labels = _data()["labels"] if labels is None else labels
    retrievers, methods, rerankers = labels.get("retriever", {}), labels.get("method", {}), labels.get("reranker", {})
    where = SystemPath.maybe(path)
    if where is None:
        return path
    system = _label(retrievers, where.system)
    if where.kind == BASE:
        return system
    if where.kind == "gar":
        return f"{_label(methods, str(where.method))} ({where.llm}) + {system}"
    if where.kind == "reranker":
        return f"{_label(rerankers, str(where.reranker))} top-{where.top_k} on {system}"
    if where.kind == "agent":
        return f"{_label(methods, str(where.method))} ({where.llm}) agent ranking, searching {system}"
    return path


@dataclass(frozen=True)
class PublishedSystem:
    """One published system: its official path, a display name and dataset -> metric -> value (0-1)."""

    path: str
    name: str
    scores: Mapping[str, Mapping[str, float]]
    note: str | None = None

    def values(self, metric: str = "ndcg_at_10") -> dict[str, float]:
        """Dataset -> published value of ``metric`` (datasets without it are left out)."""
        key = normalise_metric(metric)
        return {ds: m[key] for ds, m in self.scores.items() if key in m}


@lru_cache(maxsize=1)
def _data() -> dict:
    text = read_text("official_results.json")
    return json.loads(text)


@lru_cache(maxsize=1)
def official_tree() -> OfficialTree:
    """How the official repository's results/ tree spells rerankers (``reranker/<short>/top_<k>``, no retriever
    level: they reranked NV-Embed-v2), for :meth:`SystemPath.parse`; every other path is already the published one.

    >>> str(SystemPath.parse("reranker/mono/top_10", tree=official_tree()))
    'reranker/monobert/nv/top_10'
    """
    tree = _data()["official_tree"]
    return OfficialTree(MappingProxyType(dict(tree["reranker_names"])), tree["reranker_retriever"])


@lru_cache(maxsize=1)
def _registry() -> Registry[PublishedSystem]:
    data = _data()
    systems = {}
    for path, datasets in data["results"].items():
        scores = {ds: MappingProxyType(normalise_metrics(metrics)) for ds, metrics in datasets.items()}
        systems[path] = PublishedSystem(path, display_name(path, data["labels"]), MappingProxyType(scores),
                                        data.get("notes", {}).get(path))
    aliases = {}
    for short in official_tree().reranker_names:
        for k in ("10", "100"):
            alias = f"reranker/{short}/top_{k}"
            if (path := str(SystemPath.parse(alias, tree=official_tree()))) in systems:
                aliases[alias] = path
    return Registry("published system", systems, aliases)


def published_paths() -> list[str]:
    """The official paths of all published systems, in the file's order."""
    return _registry().names()


def published_systems() -> list[PublishedSystem]:
    """All published systems (71), in the file's order."""
    return [_registry().get(p) for p in published_paths()]


def is_published(path: str) -> bool:
    """True when ``path`` (or the official tree's spelling of it) names a published system."""
    return path.strip("/") in _registry()


def published(path: str) -> PublishedSystem:
    """The published system at ``path``; UsageError with a suggestion and the valid paths if unknown."""
    return _registry().get(path.strip("/"))


def official_tree_extras() -> frozenset[str]:
    """Collections outside the benchmark whose result files the official results/ tree keeps beside some systems
    (``BEIR_NFCorpus.json``, the authors' check on BEIR's NFCorpus): left out of tables unless asked for.

    >>> sorted(official_tree_extras())
    ['BEIR_NFCorpus']
    """
    return frozenset(_data()["official_tree"].get("other_collections", ()))


def notes() -> dict[str, str]:
    """Notes on particular published numbers (path -> text)."""
    return dict(_data().get("notes", {}))


@dataclass(frozen=True)
class LeaderboardEntry:
    """One row of R2MED's public leaderboard (package data ``r2med/data/leaderboard.json``, a copy of the table
    sampled on the date its ``_source`` gives): its ``rank``, ``name``, ``average`` (nDCG@10 x100 over the eight
    datasets, as listed), the results path it belongs under (``system``), whether the paper's results tree holds its
    per-dataset numbers (``published``) and, where the mean of those numbers differs from the listed average,
    that mean (``published_average``, x100)."""

    rank: int
    name: str
    average: float
    system: str
    published: bool
    published_average: float | None = None


@lru_cache(maxsize=1)
def _leaderboard() -> tuple[LeaderboardEntry, ...]:
    text = read_text("leaderboard.json")
    rows = json.loads(text)["rows"]
    return tuple(LeaderboardEntry(int(r["rank"]), r["name"], float(r["average"]), r["system"], bool(r["published"]),
                                  r.get("published_average")) for r in rows)


def leaderboard_entries() -> list[LeaderboardEntry]:
    """The public leaderboard's 69 rows, in its order (rank 1 first).

    >>> rows = leaderboard_entries()
    >>> len(rows), rows[1].system, rows[1].average, sum(not r.published for r in rows)
    (69, 'reranker/reasonrank-32b/e5/top_100', 42.85, 22)
    """
    return list(_leaderboard())


def leaderboard_entry(system: str) -> LeaderboardEntry | None:
    """The leaderboard's row for the results path ``system`` (None when the leaderboard has none).

    >>> leaderboard_entry("base retriever/medcpt").average, leaderboard_entry("gar/lamer/gpt4/nv")
    (9.02, None)
    """
    wanted = system.strip("/")
    return next((row for row in _leaderboard() if row.system == wanted), None)


def leaderboard_source() -> str:
    """Where the packaged leaderboard comes from (its ``_source``)."""
    text = read_text("leaderboard.json")
    return str(json.loads(text)["_source"])
