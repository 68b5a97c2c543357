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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.io.jsonsafe import loads
from r2med.store.results import SystemPath

if TYPE_CHECKING:
    from r2med.config import PipelineSpec

#: official retriever directory -> the r2med retriever that reproduces it
_AS_PUBLISHED = {"medcpt": "medcpt-authors"}


@dataclass(frozen=True)
class Plan:
    system: SystemPath
    retriever: str
    expansion: tuple[str, str] | None = None
    answer_policy: str = "authors"
    reranker: str | None = None
    rerank_top_k: int | None = None

    def spec(self, *, datasets: list[str] | None = None, data_dir: Path | None = None, output: Path = Path("results"),
             device: str | None = None, batch_size: int | None = None) -> PipelineSpec:
        """The ``PipelineSpec`` that runs this configuration: the retriever (with the published expansions and the
        authors' answer policy for GAR rows), then for reranker rows the reranker over its top k, truncated."""
        from r2med.config import PipelineSpec, RerankSpec
        from r2med.retrievers.registry import RetrieverSpec

        given = {key: value for key, value in (("device", device), ("batch_size", batch_size)) if value is not None}
        rerank = None
        if self.reranker is not None:
            rerank = RerankSpec(self.reranker, top_k=int(self.rerank_top_k or 100), truncate=True, options=given)
        return PipelineSpec(
            retrievers=(RetrieverSpec.parse(self.retriever, given=given),),
            datasets=tuple(datasets) if datasets else None, data_dir=data_dir, output=output,
            expansion="/".join(self.expansion) if self.expansion else None, answer_policy=self.answer_policy,
            reranker=rerank,
        )


@dataclass(frozen=True)
class Row:
    dataset: str
    ours: float | None
    paper: float | None
    ok: bool | None  # None: nothing to compare with

    @property
    def difference(self) -> float | None:
        return None if self.ours is None or self.paper is None else round(self.ours - self.paper, 5)


def plan_for(system: str) -> Plan:
    """The configuration that produced the published row at ``system``."""
    where = SystemPath.parse(system)
    if where.kind == "reranker":
        # the official reranker runs kept only the reranked top k (their R@100 equals R@k): truncated
        retriever = _AS_PUBLISHED.get(where.system, where.system)
        return Plan(where, retriever, reranker=str(where.reranker), rerank_top_k=where.top_k)
    if where.kind in ("fusion", "agent"):
        raise UsageError(f"{system} is not a published system ({where.kind} rows are r2med's own)")
    retriever = _AS_PUBLISHED.get(where.system, where.system)
    if where.kind == "gar":
        return Plan(where, retriever, (str(where.method), str(where.llm)))
    return Plan(where, retriever)


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
