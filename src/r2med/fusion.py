"""Fuse several runs of the same queries into one: RRF, CombSUM, CombMNZ, weighted interpolation.

Each function is small and follows its reference:

- :func:`rrf`: reciprocal rank fusion, ``sum_i w_i / (k + rank_i(d))`` with 1-based ranks and k = 60
  (Cormack, Clarke and Büttcher, SIGIR 2009); a document absent from a run gets nothing from it.
- :func:`combsum` / :func:`combmnz`: Fox and Shaw (TREC-2, 1994): the sum of the (normalised) scores a
  document gets, and that sum times the number of runs that retrieved it.
- :func:`interpolate`: ``alpha * a + (1 - alpha) * b`` of normalised scores (a document missing from a
  run counts 0 there), the usual hybrid lexical + dense combination.

Normalisation (:func:`normalise`) is per query: ``minmax`` maps a query's scores to [0, 1] (all equal:
every score becomes 1), ``zscore`` to mean 0 and standard deviation 1 (population; all equal: 0),
``none`` keeps them. The fused run lists each query's documents in trec_eval's order (fused score
descending, ties by document id descending: :meth:`Run.ranked`) and keeps the top ``depth`` (default 100),
so when ties straddle the cut the documents kept are the ones trec_eval ranks first. The ranks RRF uses
are positions in each input run's :meth:`Run.ranked` order, the ranking that run is evaluated as.

Every score must be finite: an infinite score turns min-max and z-score normalisation into NaN and
RRF's ranks into an arbitrary order, so each function raises InvalidInputError (exit 5) naming the run,
query, document and score.

>>> a = Run({"q": {"d1": 3.0, "d2": 2.0, "d3": 1.0}})
>>> b = Run({"q": {"d3": 9.0, "d1": 5.0}})
>>> rrf([a, b], k=60)["q"]  # d1: 1/61 + 1/62, d3: 1/63 + 1/61, d2: 1/62
{'d1': 0.03252247488101534, 'd3': 0.032266458495966696, 'd2': 0.016129032258064516}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from r2med.errors import InvalidInputError, UsageError
from r2med.options import flat, option, redefault
from r2med.types import Run

NORMALISATIONS = ("minmax", "zscore", "none")


@dataclass(frozen=True, kw_only=True)
class RRFOptions:
    k: float = option(60.0, "RRF's k in 1 / (k + rank)", minimum=0)
    weights: list[float] | None = option(None, "one weight per input run, comma-separated (default 1 each)",  # noqa: RUF009
                                         minimum=0, metavar="W1,W2,...")


@dataclass(frozen=True, kw_only=True)
class CombOptions:
    norm: str = option("minmax", "score normalisation per query", choices=NORMALISATIONS)
    weights: list[float] | None = redefault(RRFOptions, "weights", None)  # noqa: RUF009 (a field, as option's)


@dataclass(frozen=True, kw_only=True)
class InterpolateOptions:
    alpha: float = option(0.5, "interpolate: alpha * first + (1 - alpha) * second", minimum=0, maximum=1)
    norm: str = redefault(CombOptions, "norm", "minmax")


@dataclass(frozen=True)
class FusionMethod:
    """A fusion method: its function ``(runs, **options, depth=) -> Run`` and the class of its options."""

    function: Callable[..., Run]
    options: type


def normalise(scores: dict[str, float], method: str = "minmax") -> dict[str, float]:
    """One query's scores normalised by ``method``.

    >>> normalise({"a": 4.0, "b": 2.0, "c": 1.0})
    {'a': 1.0, 'b': 0.3333333333333333, 'c': 0.0}
    >>> normalise({"a": 4.0, "b": 2.0}, "zscore")
    {'a': 1.0, 'b': -1.0}
    >>> normalise({"a": 2.0, "b": 2.0}), normalise({"a": 2.0}, "zscore")
    ({'a': 1.0, 'b': 1.0}, {'a': 0.0})
    """
    if method not in NORMALISATIONS:
        raise UsageError(f"unknown normalisation {method!r}; valid: {', '.join(NORMALISATIONS)}")
    _check_finite(scores)
    if method == "none" or not scores:
        return dict(scores)
    values = list(scores.values())
    if method == "minmax":
        low, high = min(values), max(values)
        if high == low:
            return dict.fromkeys(scores, 1.0)
        return {d: (s - low) / (high - low) for d, s in scores.items()}
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    if std == 0.0:
        return dict.fromkeys(scores, 0.0)
    return {d: (s - mean) / std for d, s in scores.items()}


def _check_finite(scores: dict[str, float], where: str = "") -> None:
    for did, score in scores.items():
        if not math.isfinite(score):
            raise InvalidInputError(f"{where}document {did!r}: score {score!r} is not finite; fusion needs finite "
                                    "scores (fix the run or drop the document)")


def _check_runs(runs: Sequence[Run]) -> None:
    """InvalidInputError naming the first non-finite score of ``runs`` (run name, query, document, score)."""
    for run in runs:
        for qid, docs in run.items():
            _check_finite(docs, f"run {getattr(run, 'name', '?')!r}, query {qid!r}, ")


def _weights(runs: Sequence[Run], weights: Sequence[float] | None) -> list[float]:
    if not runs:
        raise UsageError("fusion needs at least one run")
    _check_runs(runs)
    if weights is None:
        return [1.0] * len(runs)
    if len(weights) != len(runs):
        raise UsageError(f"{len(weights)} weights for {len(runs)} runs; give one weight per run")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise UsageError(f"weights must be finite and >= 0, got {list(weights)}")
    return [float(w) for w in weights]


def _queries(runs: Sequence[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        seen.update(dict.fromkeys(run))
    return list(seen)


def _finish(fused: dict[str, dict[str, float]], depth: int | None, name: str) -> Run:
    out = Run(name=name)
    for qid, scores in fused.items():
        ranked = Run({qid: scores}).ranked(qid)  # trec_eval's order, ties by document id descending
        out[qid] = dict(ranked[:depth] if depth is not None else ranked)
    return out


def rrf(runs: Sequence[Run], *, k: float = 60, weights: Sequence[float] | None = None, depth: int | None = 100) -> Run:
    """Reciprocal rank fusion; ranks are 1-based positions in each run's ``ranked`` order.

    >>> rrf([Run({"q": {"x": 1.0}}), Run({"q": {"y": 1.0, "x": 0.5}})], k=1)["q"]  # x: 1/2 + 1/3, y: 1/2
    {'x': 0.8333333333333333, 'y': 0.5}
    """
    if k < 0:
        raise UsageError(f"RRF k must be >= 0, got {k}")
    w = _weights(runs, weights)
    fused: dict[str, dict[str, float]] = {}
    for qid in _queries(runs):
        scores: dict[str, float] = {}
        for run, weight in zip(runs, w):
            for rank, (did, _) in enumerate(run.ranked(qid), start=1):
                scores[did] = scores.get(did, 0.0) + weight / (k + rank)
        fused[qid] = scores
    return _finish(fused, depth, "rrf")


def _comb(runs: Sequence[Run], weights: Sequence[float] | None, norm: str, depth: int | None, name: str,
          mnz: bool) -> Run:
    w = _weights(runs, weights)
    fused: dict[str, dict[str, float]] = {}
    for qid in _queries(runs):
        total: dict[str, float] = {}
        hits: dict[str, int] = {}
        for run, weight in zip(runs, w):
            for did, score in normalise(run.get(qid, {}), norm).items():
                total[did] = total.get(did, 0.0) + weight * score
                hits[did] = hits.get(did, 0) + 1
        fused[qid] = {d: s * hits[d] for d, s in total.items()} if mnz else total
    return _finish(fused, depth, name)


def combsum(runs: Sequence[Run], *, norm: str = "minmax", weights: Sequence[float] | None = None,
            depth: int | None = 100) -> Run:
    """Sum of normalised scores (weighted).

    >>> combsum([Run({"q": {"a": 2.0, "b": 0.0}}), Run({"q": {"b": 5.0, "c": 1.0}})])["q"]  # b: 0 + 1, a: 1, c: 0
    {'b': 1.0, 'a': 1.0, 'c': 0.0}
    """
    return _comb(runs, weights, norm, depth, "combsum", mnz=False)


def combmnz(runs: Sequence[Run], *, norm: str = "minmax", weights: Sequence[float] | None = None,
            depth: int | None = 100) -> Run:
    """CombSUM times the number of runs that retrieved the document.

    >>> combmnz([Run({"q": {"a": 2.0, "b": 0.0}}), Run({"q": {"b": 5.0, "c": 1.0}})])["q"]  # b: (0 + 1) * 2
    {'b': 2.0, 'a': 1.0, 'c': 0.0}
    """
    return _comb(runs, weights, norm, depth, "combmnz", mnz=True)


def interpolate(runs: Sequence[Run], *, alpha: float = 0.5, norm: str = "minmax", depth: int | None = 100) -> Run:
    """``alpha * first + (1 - alpha) * second`` of normalised scores; exactly two runs.

    >>> interpolate([Run({"q": {"a": 1.0, "b": 0.0}}), Run({"q": {"b": 1.0, "a": 0.0}})], alpha=0.75)["q"]
    {'a': 0.75, 'b': 0.25}
    """
    if len(runs) != 2:
        raise UsageError(f"interpolation fuses exactly 2 runs, got {len(runs)}")
    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"alpha must be in [0, 1], got {alpha}")
    return _comb(runs, [alpha, 1.0 - alpha], norm, depth, "interpolate", mnz=False)


#: the fusion methods by name: adding one is its function and one row here
METHODS: Mapping[str, FusionMethod] = MappingProxyType({
    "rrf": FusionMethod(rrf, RRFOptions),
    "combsum": FusionMethod(combsum, CombOptions),
    "combmnz": FusionMethod(combmnz, CombOptions),
    "interpolate": FusionMethod(interpolate, InterpolateOptions),
})


def fusion_method(method: str) -> FusionMethod:
    if method not in METHODS:
        raise UsageError(f"unknown fusion method {method!r}; valid: {', '.join(METHODS)}")
    return METHODS[method]


def fuse(runs: Sequence[Run], method: str = "rrf", **options: Any) -> Run:
    """Dispatch to one of :data:`METHODS` with its keyword options (checked against its options class).

    >>> fuse([Run({"q": {"x": 1.0}})], "rrf", alpha=0.5)
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: fusion method 'rrf' takes k, weights (not alpha)
    """
    found = fusion_method(method)
    depth = options.pop("depth", 100)
    try:
        values = flat(found.options(**options))
    except TypeError:
        valid = ", ".join(flat(found.options()))
        raise UsageError(f"fusion method {method!r} takes {valid} (not {', '.join(sorted(options))})") from None
    return found.function(runs, **values, depth=depth)
