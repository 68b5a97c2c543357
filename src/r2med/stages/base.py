"""The stage protocols (``Stage``: a ``Run``; ``FileStage``: files) and what the runner returns per dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from r2med.datasets.model import Dataset
from r2med.store.results import ResultFiles, SystemPath
from r2med.types import Run, Scores, exact_mean


@runtime_checkable
class Stage(Protocol):
    """One step of a pipeline: a dataset in, a ``Run`` out; the runner stores and evaluates it.

    ``where`` is the results path (``base retriever/bm25``, ``gar/hyde/gpt4/nv``, ``fusion/x``,
    ``reranker/bge/nv/top_10``). ``config(dataset)`` is everything that determines the run besides the
    dataset's files (the runner adds the system, the data and ``ignore_identical_ids``): a stored result
    whose manifest has the same configuration is reused. ``run(dataset)`` makes the run; afterwards
    ``details(dataset)`` adds facts to the manifest (LLM usage, fallbacks) and ``artifacts(dataset)``
    names extra JSONL files (``{"windows": [rows]}`` -> ``<Dataset>.windows.jsonl``) stored beside the result; a
    stage may define ``artifact_notes(dataset) -> [(artifact, warning)]``, logged with the artifact's path once it is
    written.
    A stage may set ``judged_all = True``: judged queries missing from its run then count as 0 (an agent's query
    without a search); by default only queries in both are averaged, as the official numbers were. A stage whose
    result depends on files outside its result set (the agent's expansion folder) may define
    ``stored_problem(dataset, details) -> str | None``: the runner reuses a stored result only when it says None.
    """

    where: SystemPath
    ignore_identical_ids: bool

    def config(self, dataset: Dataset) -> dict[str, Any]: ...

    def run(self, dataset: Dataset) -> Run: ...

    def details(self, dataset: Dataset) -> dict[str, Any]: ...

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]: ...


def component_key(component: Any, key: dict[str, Any] | None, *describe_args: Any) -> dict[str, Any]:
    """What keys a stored result of ``component`` (a retriever, a reranker): ``key``, its declared options (from the
    spec that built it: no component can forget them), and what the component adds itself (``describe(...)``, e.g. a
    model fingerprint); without a ``describe``, its class and name.

    >>> class Plain:
    ...     name = "mine"
    >>> component_key(Plain(), {"options": {"k": 3}})
    {'class': 'r2med.stages.base.Plain', 'name': 'mine', 'options': {'options': {'k': 3}}}
    """
    own = getattr(component, "describe", None)
    if callable(own):
        described = dict(own(*describe_args))
    else:
        cls = type(component)
        described = {"class": f"{cls.__module__}.{cls.__qualname__}".replace(".<locals>", ""), "name": component.name}
    if "options" in described:
        raise ValueError(f"{type(component).__name__}.describe() must not use the key 'options' (the declared ones)")
    return {**described, "options": dict(key or {})}


@dataclass(frozen=True)
class DatasetResult:
    """One stage's result on one dataset: its scores, files, seconds, whether a stored result was reused,
    and the manifest details of a fresh run (empty when reused)."""

    dataset: str
    scores: Scores
    files: ResultFiles | None
    seconds: float
    reused: bool = False
    details: dict[str, Any] = field(default_factory=dict)


def summarise(results: list[DatasetResult]) -> dict[str, dict[str, float]]:
    """``{"<Dataset>": {key: 5-decimal mean}, ..., "average": {key: mean over datasets}}``.

    The average is the exact mean of the 5-decimal values (``r2med.types.exact_mean``), not rounded again: the
    leaderboard computes the same mean from the same values, so both show the same two decimals.

    >>> from r2med.types import Scores
    >>> fake = [DatasetResult(n, Scores({"ndcg_at_10": v}), None, 0.0) for n, v in (("A", 0.1), ("B", 0.2))]
    >>> summarise(fake)
    {'A': {'ndcg_at_10': 0.1}, 'B': {'ndcg_at_10': 0.2}, 'average': {'ndcg_at_10': 0.15}}
    """
    table = {r.dataset: r.scores.rounded(5) for r in results}
    if results:
        keys = list(table[results[0].dataset])
        table["average"] = {k: exact_mean([row[k] for row in table.values()]) for k in keys}
    return table


@dataclass(frozen=True)
class Product:
    """What a ``FileStage`` made of one dataset: its files (name -> JSONL rows, or text), the facts its manifest
    records (``details``) and the stage's own report (``outcome``, handed back with the result).

    ``problem``: why the product is incomplete (failed queries): its files are written, without a manifest, so a
    rerun makes it again. ``halt``: raised once the files are written (a spent budget: no other dataset can run).
    """

    files: dict[str, list[dict[str, Any]] | str]
    details: dict[str, Any] = field(default_factory=dict)
    outcome: Any = None
    problem: str | None = None
    halt: Exception | None = None


@runtime_checkable
class FileStage(Protocol):
    """A step whose product is files, not a ``Run`` (``r2med expand``'s expansion file): nothing is evaluated.

    ``name`` says what makes the files (the manifest's ``system``, e.g. ``expand/hyde/gpt4``); ``folder(dataset)``
    is where they go, their manifest ``<anchor>.manifest.json`` beside them. ``config(dataset)`` is everything that
    determines them besides the dataset's files: a stored product whose manifest records the same configuration, and
    whose files match it, is kept and ``reused(dataset, details)`` gives its outcome from the manifest's details;
    otherwise ``produce(dataset)`` makes it.
    """

    name: str
    anchor: str

    def folder(self, dataset: Dataset) -> Path: ...

    def config(self, dataset: Dataset) -> dict[str, Any]: ...

    def produce(self, dataset: Dataset) -> Product: ...

    def reused(self, dataset: Dataset, details: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class ProductResult:
    """A ``FileStage``'s result on one dataset: where its files are, the seconds, whether a stored product was kept,
    and the stage's outcome (its report)."""

    dataset: str
    folder: Path
    seconds: float
    outcome: Any = None
    reused: bool = False
