"""``r2med reproduce SYSTEM``: run a published configuration and compare with the paper's numbers.

A system is named by its official path (``base retriever/bm25``, ``gar/hyde/gpt4/nv``). The plan is
the configuration the authors ran: the retriever of the path (MedCPT as they ran it, the article
encoder for both sides: ``medcpt-authors``), the published expansions for GAR rows with the authors'
handling of reasoning outputs (answer policy ``authors``), for reranker rows the first stage then the
reranker over its top k, keeping only those k as the official runs did, and the official scoring. The comparison is
made on the 5-decimal values the result files hold; a difference larger than ``tolerance`` (default
0.0001, i.e. 0.01 on the x100 scale the paper prints) fails.

>>> plan_for("base retriever/medcpt").retriever, plan_for("gar/hyde/r1-qwen-32b/bm25").expansion
('medcpt-authors', ('hyde', 'r1-qwen-32b'))
>>> p = plan_for("reranker/monobert/nv/top_10"); p.retriever, p.reranker, p.rerank_top_k
('nv', 'monobert', 10)
>>> [row.ok for row in compare({"A": 0.5, "B": 0.3}, {"A": 0.5, "B": 0.2999, "C": 0.1}, tolerance=0.0001)]
[True, True, None]

Every row of R2MED's public leaderboard (package data ``leaderboard.json``) and every published result folder has a
plan (:func:`list_plans`: 69 + 24 = 93), known without loading anything: the retriever, where a GAR row's expansions
come from (the authors' published hub files, found in the dataset directory, then r2med's generated ones under
R2MED_HOME, then the hub; or to be generated), the answer policy, the reranker and its first stage, the top k, and
what it needs (``r2med.needs``: each component's own declaration). A leaderboard row without per-dataset numbers
is compared on its average, the only number published, to 0.01.

>>> p = plan_for("gar/hyde/o3-mini/bm25"); p.expansion_source, p.hub_split, p.compare
('hub', ('hyde', 'o3_mini'), 'average')
>>> [n.kind for n in plan_for("base retriever/openai").needs]
['api-key', 'hub']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.io.jsonsafe import loads
from r2med.first_stages import first_stage_needs, published_first_stage
from r2med.needs import Need, merged
from r2med.store.results import SystemPath

if TYPE_CHECKING:
    from r2med.config import PipelineSpec
    from r2med.reporting.official import LeaderboardEntry

#: official retriever directory -> the r2med retriever that reproduces it
_AS_PUBLISHED = {"medcpt": "medcpt-authors"}
#: what every plan needs: the datasets
_DATASETS = Need("hub", "the R2MED datasets (or --data-dir with local copies)")
#: where find_expansions looks for a published expansion file, in turn (r2med.expansion.published)
EXPANSION_SEARCH = ("the dataset directory", "r2med's generated expansions under R2MED_HOME", "the hub")


@dataclass(frozen=True)
class Plan:
    """What r2med runs for a published system: the retriever (with the expansions of a GAR row and the authors'
    answer policy), for a reranker row the reranker over the first stage's top ``rerank_top_k`` (r2med's own run
    of the retriever, or the stored runs of ``first_stage``: a path, a URL or ``authors``), the first stage's
    ``top_k``, and what it needs. ``leaderboard``: the public leaderboard's row; ``published``: the paper's results
    tree holds its per-dataset numbers."""

    system: SystemPath
    retriever: str
    expansion: tuple[str, str] | None = None
    answer_policy: str = "authors"
    reranker: str | None = None
    rerank_top_k: int | None = None
    top_k: int = 100
    first_stage: str | None = None
    published: bool = True
    leaderboard: LeaderboardEntry | None = None
    needs: tuple[Need, ...] = field(default=(), compare=False)

    @property
    def expansion_source(self) -> str | None:
        """``hub`` for the expansions the authors published, ``generate`` for others (``r2med expand``)."""
        if self.expansion is None:
            return None
        from r2med.datasets.catalog import published_expansions

        method, llm = self.expansion
        return "hub" if llm in published_expansions().get(method, ()) else "generate"

    @property
    def hub_split(self) -> tuple[str, str] | None:
        """The hub dataset config and split of the published expansions (``("hyde", "o3_mini")``)."""
        if self.expansion is None or self.expansion_source != "hub":
            return None
        from r2med.datasets.catalog import hub_split

        return self.expansion[0], hub_split(self.expansion[1])

    @property
    def first_stage_system(self) -> str | None:
        """The published path of a reranker row's first stage (``base retriever/e5``)."""
        return str(SystemPath.base(self.system.system)) if self.system.kind == "reranker" else None

    @property
    def compare(self) -> str:
        """``datasets`` (the paper's per-dataset numbers) or ``average`` (the leaderboard's, the only one published)."""
        return "datasets" if self.published else "average"

    def with_first_stage(self, source: str | None) -> Plan:
        """This plan with stored first-stage runs (a path, a URL or ``authors``) instead of running the retriever."""
        if source is None:
            return self
        if self.system.kind != "reranker":
            raise UsageError(f"--first-stage is for reranker rows; {self.system} has no first stage to replace")
        known = published_first_stage(source)
        if known is not None and known["system"] != self.system.system:
            raise UsageError(f"--first-stage {source}: {known['description']} are {known['paper_row']}'s first stage, "
                             f"and {self.system} reranks {self.first_stage_system}; pass that one's runs instead")
        plan = replace(self, first_stage=str(source))
        return replace(plan, needs=_needs(plan))

    def to_json(self) -> dict[str, Any]:
        """The plan as plain data (``reproduce --dry-run --json``, ``--list --json``)."""
        from r2med.expansion.published import EXPANSION_FILE

        expansion = None
        if self.expansion is not None:
            method, llm = self.expansion
            expansion = {"spec": f"{method}/{llm}", "source": self.expansion_source,
                         "file": f"{method}/{llm}/{EXPANSION_FILE}"}
            if self.hub_split is not None:
                expansion.update(hub_config=self.hub_split[0], hub_split=self.hub_split[1],
                                 searched=list(EXPANSION_SEARCH))
        first = None
        if self.first_stage_system is not None:
            first = {"system": self.first_stage_system, "runs": self.first_stage or "r2med", "top_k": self.top_k}
            known = published_first_stage(self.first_stage)
            if known is not None:
                first.update(url=known["url"], paper_row=known["paper_row"])
        board = self.leaderboard
        return {
            "system": str(self.system), "kind": self.system.kind,
            "leaderboard": None if board is None else {"rank": board.rank, "name": board.name, "average": board.average},
            "published": self.published, "compare": self.compare,
            "retriever": self.retriever if self.first_stage is None else None,
            "expansion": expansion, "answer_policy": self.answer_policy if self.expansion else None,
            "reranker": self.reranker, "rerank_top_k": self.rerank_top_k, "first_stage": first,
            "top_k": self.top_k, "needs": [need.to_json() for need in self.needs],
        }

    def spec(self, *, datasets: list[str] | None = None, data_dir: Path | None = None, output: Path = Path("results"),
             device: str | None = None, batch_size: int | None = None,
             first_stage: str | Path | None = None, timeout: float | None = None,
             max_retries: int | None = None, options: Mapping[str, Any] | None = None) -> PipelineSpec:
        """The ``PipelineSpec`` that runs this configuration: the retriever (with the published expansions and the
        authors' answer policy for GAR rows), then for reranker rows the reranker over its top k, truncated; with
        ``first_stage`` (a local file or directory of stored runs) the reranker over those instead, its results
        under the first stage's published name (``reranker/<reranker>/e5/top_100``). ``options``: more option values
        by name (the LLM endpoint's ``base_url``, ``llm_model``, ``api_key_env``), each taken by the components that
        declare it."""
        from r2med.config import PipelineSpec, RerankSpec
        from r2med.retrievers.registry import RetrieverSpec

        # each component takes the values its options declare (a server's deadline and retries: the LLM's, the
        # embeddings API's), and leaves out the others
        given = {key: value for key, value in (("device", device), ("batch_size", batch_size), ("timeout", timeout),
                                               ("max_retries", max_retries)) if value is not None}
        given.update({key: value for key, value in (options or {}).items() if value is not None})
        rerank = None
        if self.reranker is not None:
            rerank = RerankSpec(self.reranker, top_k=int(self.rerank_top_k or 100), truncate=True, options=given)
        if first_stage is not None:
            if rerank is None:
                raise UsageError(f"{self.system} is not a reranker row: it has no first stage to replace")
            return PipelineSpec(first_stage=first_stage, first_stage_system=self.system.system,
                                datasets=tuple(datasets) if datasets else None, data_dir=data_dir, output=output,
                                reranker=rerank)
        return PipelineSpec(
            retrievers=(RetrieverSpec.parse(self.retriever, given=given),),
            datasets=tuple(datasets) if datasets else None, data_dir=data_dir, output=output,
            expansion="/".join(self.expansion) if self.expansion else None, answer_policy=self.answer_policy,
            reranker=rerank,
        )


def _needs(plan: Plan) -> tuple[Need, ...]:
    """What ``plan`` needs, from each component's own declaration (nothing is loaded or contacted)."""
    from r2med.retrievers.registry import RetrieverSpec

    groups: list[tuple[Need, ...]] = [(_DATASETS,)]
    groups.append(RetrieverSpec.parse(plan.retriever).needs() if plan.first_stage is None
                  else first_stage_needs(plan.first_stage))
    if plan.expansion is not None:
        method, llm = plan.expansion
        if plan.hub_split is not None:
            config, split = plan.hub_split
            groups.append((Need("hub", f"the authors' {method}/{llm} expansions (config {config}, split {split})"),))
        else:
            groups.append((Need("llm-server", f"to generate the {method}/{llm} expansions: r2med expand"),))
    if plan.reranker is not None:
        from r2med.rerankers.registry import reranker_needs

        groups.append(reranker_needs(plan.reranker))
    return merged(*groups)


@dataclass(frozen=True)
class Row:
    dataset: str
    ours: float | None
    paper: float | None
    ok: bool | None  # None: nothing to compare with

    @property
    def difference(self) -> float | None:
        return None if self.ours is None or self.paper is None else round(self.ours - self.paper, 5)




def plan_for(system: str, *, first_stage: str | None = None) -> Plan:
    """The configuration that produced the published row at ``system`` (a leaderboard row or a published result
    folder); ``first_stage``: stored runs for a reranker row (a path, a URL, or ``authors``). Loads nothing."""
    from r2med.reporting.official import is_published, leaderboard_entry, published

    where = SystemPath.parse(system)
    if where.kind in ("fusion", "agent"):
        raise UsageError(f"{system} is not a published system ({where.kind} rows are r2med's own)")
    board = leaderboard_entry(str(where))
    on_paper = is_published(str(where))
    if on_paper:
        where = SystemPath.parse(published(str(where)).path)
    elif board is None:
        from r2med.registry import Registry
        from r2med.reporting.official import leaderboard_entries, published_paths

        known = {path: path for path in (*(row.system for row in leaderboard_entries()), *published_paths())}
        Registry("published system", known).get(str(where))  # UsageError: the closest of the 93 and the valid ones
    retriever = _AS_PUBLISHED.get(where.system, where.system)
    if where.kind == "reranker":
        # the official reranker runs kept only the reranked top k (their R@100 equals R@k): truncated
        plan = Plan(where, retriever, reranker=str(where.reranker), rerank_top_k=where.top_k, published=on_paper,
                    leaderboard=board)
    elif where.kind == "gar":
        plan = Plan(where, retriever, (str(where.method), str(where.llm)), published=on_paper, leaderboard=board)
    else:
        plan = Plan(where, retriever, published=on_paper, leaderboard=board)
    plan = replace(plan, needs=_needs(plan))
    return plan.with_first_stage(first_stage)


def list_plans() -> list[dict[str, Any]]:
    """Every leaderboard row (rank order), then every published result folder not on it (file order): 93 entries,
    each with its average (the leaderboard's, or the mean of the published numbers), its plan (``plan``:
    :meth:`Plan.to_json`) or the reason r2med has none for it (``problem``)."""
    from r2med.reporting.official import leaderboard_entries, published_systems
    from r2med.reporting.tables import pct
    from r2med.types import exact_mean

    board = leaderboard_entries()
    listed = {row.system for row in board}
    rows: list[tuple[int | None, str, str, float]] = [(r.rank, r.system, r.name, r.average) for r in board]
    for system in published_systems():
        if system.path not in listed:
            rows.append((None, system.path, system.name, float(pct(exact_mean(system.values("ndcg_at_10").values())))))
    entries: list[dict[str, Any]] = []
    for rank, system, name, average in rows:
        entry: dict[str, Any] = {"rank": rank, "system": system, "name": name, "average": average,
                                 "on_leaderboard": rank is not None}
        try:
            entry.update(plan=plan_for(system).to_json(), problem=None)
        except UsageError as exc:
            entry.update(plan=None, problem=str(exc))
        entries.append(entry)
    return entries


@dataclass(frozen=True)
class AverageCheck:
    """A leaderboard row compared on its average, the only number published: ours (0-1, the exact mean of the 8
    datasets' 5-decimal values) against the listed one (x100, 2 decimals), at ``tolerance`` (0-1 scale)."""

    ours: float | None
    listed: float
    tolerance: float
    missing: tuple[str, ...] = ()

    @property
    def shown(self) -> str | None:
        from r2med.reporting.tables import pct

        return None if self.ours is None else pct(self.ours)

    @property
    def difference(self) -> float | None:
        """Ours minus the listed average, x100, on the 2 decimals both are printed with."""
        return None if self.shown is None else float(Decimal(self.shown) - Decimal(repr(self.listed)))

    @property
    def ok(self) -> bool | None:
        if self.difference is None:
            return None
        return abs(Decimal(repr(self.difference))) <= Decimal(repr(self.tolerance)) * 100 + Decimal("1e-9")


def check_average(ours: dict[str, float], listed: float, *, tolerance: float) -> AverageCheck:
    """Our average over R2MED's eight datasets against the leaderboard's ``listed`` one (None without all eight).

    >>> check_average({d: 0.4285 for d in ("a",)}, 42.85, tolerance=0.0001).missing[:2]
    ('Biology', 'Bioinformatics')
    """
    from r2med.datasets.catalog import dataset_names
    from r2med.types import exact_mean

    missing = tuple(d for d in dataset_names() if d not in ours)
    mean = None if missing else exact_mean([ours[d] for d in dataset_names()])
    return AverageCheck(mean, listed, tolerance, missing)


def compare(ours: dict[str, float], paper: dict[str, float], *, tolerance: float) -> list[Row]:
    """One row per dataset of ``ours`` (in its order), then the paper's datasets we did not run (paper order)."""
    rows = []
    for dataset, value in ours.items():
        reference = paper.get(dataset)
        ok = None if reference is None else abs(round(value - reference, 5)) <= tolerance + 1e-12
        rows.append(Row(dataset, value, reference, ok))
    from r2med.datasets.catalog import dataset_names

    order = dataset_names()
    rest = sorted((d for d in paper if d not in ours), key=lambda d: (order.index(d) if d in order else len(order), d))
    rows.extend(Row(d, None, paper[d], None) for d in rest)
    return rows


def load_reference(path: Path, system: str, metric: str) -> dict[str, float]:
    """Reference values from a JSON file: ``{"<Dataset>": {"<metric>": value}}`` or the official results
    format ``{"results": {"<system path>": {"<Dataset>": {...}}}}``."""
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"--reference {path}: file not found")
    try:
        raw: Any = loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(raw, dict) and isinstance(raw.get("results"), dict):
        if system not in raw["results"]:
            raise InvalidInputError(f"{path}: no results for {system!r} (has {', '.join(sorted(raw['results']))})")
        raw = raw["results"][system]
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{path}: expected an object of datasets, got {type(raw).__name__}")
    values = {}
    for dataset, metrics in raw.items():
        if not isinstance(metrics, dict) or not isinstance(metrics.get(metric), (int, float)):
            raise InvalidInputError(f"{path}: {dataset!r} has no numeric {metric!r}")
        values[dataset] = float(metrics[metric])
    return values


def published_reference(system: str, metric: str) -> dict[str, float]:
    """The paper's values of ``metric`` for ``system`` (package data)."""
    from r2med.reporting.official import published

    return published(system).values(metric)
