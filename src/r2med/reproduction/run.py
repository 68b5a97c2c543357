"""``reproduce(system)``: run a published system's plan and compare our numbers with the paper's.

The use case of ``r2med reproduce SYSTEM`` as one library call: the plan (``plan_for``), a reranker row's stored
first stage (downloaded or pinned, checksummed, then evaluated beside the paper's row of its retriever), the
reference numbers (the paper's, or a file's), the pipeline run, and the comparison: per dataset, and for a
leaderboard row without per-dataset numbers, the average against the leaderboard's. Nothing is printed; the
command prints the :class:`Reproduction` this returns.

The LLM endpoint is taken as every LLM command takes it (``r2med.llm.endpoint.LLMOptions``, declared there once):
:data:`ENDPOINT_OPTIONS` by name, each handed to the components of the plan that declare it (ReasonRank's
``base_url``; the embeddings API's and the first-stage download's ``timeout`` and ``max_retries``). One that no
component of the plan takes is a UsageError, before any work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.errors import MissingResourceError, UsageError
from r2med.reproduction.plans import AverageCheck, Plan, Row, check_average, compare, plan_for
from r2med.store.results import SystemPath

if TYPE_CHECKING:
    from r2med.first_stages import FirstStageRuns
    from r2med.settings import Settings
    from r2med.stages import DatasetResult

#: the LLM endpoint options ``reproduce`` takes (``LLMOptions``' declarations: flags ``--base-url``, ``--llm-model``,
#: ``--api-key-env``, ``--timeout``, ``--max-retries``)
ENDPOINT_OPTIONS = ("base_url", "llm_model", "api_key_env", "timeout", "max_retries")
#: what a stored first stage's download takes (``r2med.http.download``)
_DOWNLOAD_OPTIONS = ("timeout", "max_retries")


@dataclass(frozen=True)
class Reproduction:
    """Ours beside the reference, for ``system`` (its results under ``retriever``'s name): ``rows`` per dataset
    (ours, the paper's, the difference, ok at ``tolerance``), ``average`` (a leaderboard row without per-dataset
    numbers: our average of the 8 datasets against the listed one) and ``first_stage`` (a reranker row's stored first
    stage, evaluated before reranking beside the paper's row of its retriever)."""

    system: str
    retriever: str
    metric: str
    tolerance: float
    rows: tuple[Row, ...]
    plan: Plan
    average: AverageCheck | None = None
    first_stage: dict[str, Any] | None = None

    @property
    def compared(self) -> int:
        """How many values had a reference: datasets, and the average."""
        average = self.average is not None and self.average.ok is not None
        return sum(row.ok is not None for row in self.rows) + average

    @property
    def failed(self) -> list[str]:
        """The datasets (and ``average``) that differ by more than the tolerance."""
        average = ["average"] if self.average is not None and self.average.ok is False else []
        return [row.dataset for row in self.rows if row.ok is False] + average

    @property
    def ok(self) -> bool:
        """Something was compared and nothing differs."""
        return bool(self.compared) and not self.failed

    def to_json(self) -> dict[str, Any]:
        """Plain data (``r2med reproduce --json``)."""
        out: dict[str, Any] = {
            "system": self.system, "metric": self.metric, "tolerance": self.tolerance, "ok": self.ok,
            "compared": self.compared,
            "datasets": {r.dataset: {"ours": r.ours, "paper": r.paper, "difference": r.difference, "ok": r.ok}
                         for r in self.rows}}
        if self.average is not None:
            a = self.average
            out["average"] = {"ours": a.ours, "ours_x100": a.shown, "leaderboard": a.listed,
                              "difference_x100": a.difference, "ok": a.ok, "missing": list(a.missing),
                              "note": "the leaderboard publishes only this row's average over the 8 datasets"}
        if self.first_stage is not None:
            out["first_stage"] = self.first_stage
        return out


def reproduce(system: str, *, datasets: list[str] | None = None, data_dir: str | Path | None = None,
              output: str | Path = "results", first_stage: str | None = None, reference: str | Path | None = None,
              metric: str = "ndcg_at_10", tolerance: float = 0.0001, device: str | None = None,
              batch_size: int | None = None, base_url: str | None = None, llm_model: str | None = None,
              api_key_env: str | None = None, timeout: float | None = None, max_retries: int | None = None,
              force: bool = False, progress: bool = True, settings: Settings | None = None,
              on_result: Callable[[str, DatasetResult], None] | None = None) -> Reproduction:
    """Run ``system`` (a leaderboard row or published result folder, e.g. ``base retriever/bm25``) as published on
    ``datasets`` (default all 8; ``data_dir``: local copies) into ``output``, and compare ``metric`` with the paper's
    numbers (``reference``: a JSON file of other numbers) at ``tolerance`` (0-1 scale).

    ``first_stage``: a reranker row's stored first-stage runs (a path, a URL or ``authors``), checksummed (a changed
    file is refused unless ``force``). ``base_url``, ``llm_model``, ``api_key_env``, ``timeout``, ``max_retries``: the
    LLM endpoint (``LLMOptions``; None: each component's default, the server from ``$OPENAI_BASE_URL``);
    ``device``, ``batch_size``: dense models'. ``force`` recomputes stored results; ``on_result(system path,
    result)`` is called after each dataset.
    """
    from r2med.pipeline import run_pipeline
    from r2med.settings import get_settings

    plan = plan_for(system, first_stage=first_stage)
    settings = settings or get_settings()
    data_dir = None if data_dir is None else Path(data_dir)
    endpoint = {key: value for key, value in (("base_url", base_url), ("llm_model", llm_model),
                                              ("api_key_env", api_key_env), ("timeout", timeout),
                                              ("max_retries", max_retries)) if value is not None}
    check_endpoint(plan, endpoint)
    paper = _reference(plan, reference, metric)
    runs = None if first_stage is None else _first_stage(plan, datasets, data_dir, settings, force, endpoint)
    table = None if runs is None else _first_stage_table(plan, runs, datasets, data_dir, settings, metric, tolerance)
    options = {key: value for key, value in endpoint.items() if key not in ("timeout", "max_retries")}
    spec = plan.spec(datasets=datasets, data_dir=data_dir, output=Path(output), device=device, batch_size=batch_size,
                     first_stage=None if runs is None else runs.path, timeout=timeout, max_retries=max_retries,
                     options=options)
    stages = run_pipeline(spec, settings=settings, progress=progress, resume=not force, on_result=on_result)
    results = list(stages.values())[-1]
    ours = {r.dataset: r.scores.rounded(5)[metric] for r in results if metric in r.scores.aggregate}
    if len(ours) < len(results):
        raise UsageError(f"--metric {metric!r} is not among the result metrics (e.g. ndcg_at_10, recall_at_100, mrr)")
    average = None
    if reference is None and not plan.published:
        assert plan.leaderboard is not None  # plan_for: a row neither published nor on the leaderboard is unknown
        average = check_average(ours, plan.leaderboard.average, tolerance=tolerance)
    return Reproduction(str(plan.system), SystemPath.parse(next(iter(stages))).system, metric, tolerance,
                        tuple(compare(ours, paper, tolerance=tolerance)), plan, average, table)


def check_endpoint(plan: Plan, endpoint: Mapping[str, Any]) -> None:
    """UsageError naming each endpoint option that no component of ``plan`` takes (before any work)."""
    from r2med.options import options_of
    from r2med.retrievers.registry import RetrieverSpec

    taken: set[str] = set()
    if plan.first_stage is None:
        taken |= RetrieverSpec.parse(plan.retriever).family().option_names()
    else:
        taken |= set(_DOWNLOAD_OPTIONS)
    if plan.reranker is not None:
        from r2med.rerankers.registry import reranker_kind

        taken |= {opt.name for opt in options_of(reranker_kind(plan.reranker).options)}
    unused = [key for key in ENDPOINT_OPTIONS if key in endpoint and key not in taken]
    if unused:
        flags = ", ".join("--" + key.replace("_", "-") for key in unused)
        raise UsageError(f"{flags}: {plan.system} calls no server that takes {'it' if len(unused) == 1 else 'them'} "
                         f"(its retriever {plan.retriever}{', reranker ' + plan.reranker if plan.reranker else ''}); "
                         "drop it")


def check_places(*, datasets: list[str] | None = None, data_dir: str | Path | None = None,
                 output: str | Path = "results", settings: Settings | None = None) -> None:
    """The places a reproduction was given, checked without loading or contacting anything (``--dry-run``): the
    datasets named and found under ``data_dir`` (with none given: R2MED's eight, from the hub when run), and an
    ``output`` results can be written to. Every problem at once (``PlanError``), as the run would report them."""
    from r2med.datasets.loading import locate
    from r2med.errors import Problems
    from r2med.io.dirs import check_output_dir

    problems = Problems()
    problems.check(lambda: check_output_dir(Path(output)))
    problems.check(lambda: locate(list(datasets) if datasets else None,
                                  data_dir=None if data_dir is None else Path(data_dir), settings=settings))
    problems.raise_any()


def llm_server(plan: Plan, base_url: str | None = None, *, settings: Settings | None = None) -> str | None:
    """The LLM server ``plan`` would call, as shown (credentials hidden): ``base_url``, else ``$OPENAI_BASE_URL``,
    else what to pass; None for a plan that calls no LLM server."""
    from r2med.http.rules import safe_url
    from r2med.settings import get_settings

    if not any(need.kind == "llm-server" for need in plan.needs):
        return None
    if base_url:
        return f"{safe_url(base_url)} (--base-url)"
    found = (settings or get_settings()).openai_base_url
    return f"{safe_url(found)} ($OPENAI_BASE_URL)" if found else "none given: pass --base-url URL"


def _reference(plan: Plan, reference: str | Path | None, metric: str) -> dict[str, float]:
    """The numbers compared with: a file's, else the paper's (none for a leaderboard-only row: its average is)."""
    from r2med.reproduction.plans import load_reference, published_reference

    system = str(plan.system)
    if reference is not None:
        return load_reference(Path(reference), system, metric)
    if plan.published:
        return published_reference(system, metric)
    if metric != "ndcg_at_10":  # before any work: the leaderboard has nothing else to compare with
        raise MissingResourceError(f"{system}: the leaderboard publishes only its average nDCG@10; there is no "
                                   f"{metric} to compare with (use --metric ndcg_at_10, or --reference FILE)")
    return {}


def _first_stage(plan: Plan, datasets: list[str] | None, data_dir: Path | None, settings: Settings, force: bool,
                 endpoint: Mapping[str, Any]) -> FirstStageRuns:
    """The stored first stage, downloaded under the endpoint's deadline and retries (or pinned), checksummed."""
    from r2med.datasets.loading import locate
    from r2med.first_stages import resolve_first_stage

    assert plan.first_stage is not None
    names = [name for name, _ in locate(datasets, data_dir=data_dir, settings=settings)]
    get = None
    if any(key in endpoint for key in _DOWNLOAD_OPTIONS):  # the download under the command's deadline
        from functools import partial

        from r2med.http.download import download
        from r2med.http.retry import RetryPolicy

        get = partial(download, **({"timeout": endpoint["timeout"]} if "timeout" in endpoint else {}),
                      **({"policy": RetryPolicy(max_retries=endpoint["max_retries"])} if "max_retries" in endpoint
                         else {}))
    return resolve_first_stage(plan.first_stage, names, home=settings.home, force=force, get=get)


def _first_stage_table(plan: Plan, runs: FirstStageRuns, datasets: list[str] | None, data_dir: Path | None,
                       settings: Settings, metric: str, tolerance: float) -> dict[str, Any]:
    """The stored first stage evaluated before the reranker runs, beside the paper's row of its retriever."""
    from r2med.datasets import dataset_loaders
    from r2med.first_stages import evaluate_first_stage
    from r2med.reporting.official import is_published, published

    loaders = dataset_loaders(list(datasets) if datasets else None, data_dir=data_dir, settings=settings)
    paper_row = plan.first_stage_system
    values = evaluate_first_stage(runs, loaders, system=plan.system.system, metric=metric)
    paper = published(paper_row).values(metric) if paper_row and is_published(paper_row) else {}
    rows = compare(values, paper, tolerance=tolerance)
    out: dict[str, Any] = {
        "source": runs.source, "paper_row": paper_row,
        "published_runs": None if runs.known is None else runs.known["description"],
        "files": [f.to_json() for f in runs.files],
        "datasets": {r.dataset: {"first_stage": r.ours, "paper": r.paper, "difference": r.difference} for r in rows}}
    if len(values) == 8 and len(paper) == 8:
        from r2med.types import exact_mean

        out["average"] = {"first_stage": exact_mean(list(values.values())), "paper": exact_mean(list(paper.values()))}
    return out
