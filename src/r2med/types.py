"""The one data model every stage shares.

- ``Qrels``: query id -> document id -> graded relevance (int).
- ``Run``: query id -> document id -> score (float); its ranking is :meth:`Run.ranked`.
- ``Scores``: what evaluation returns: the averaged measures and the per-query values.

Ids are always strings. ``Qrels`` and ``Run`` are plain ``dict`` subclasses, so they go straight
into pytrec_eval and json; stages build new objects and never mutate their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Qrels(dict):
    """Relevance judgements: ``{qid: {docid: relevance}}``.

    >>> q = Qrels({"q1": {"d1": 1, "d2": 0}})
    >>> q.n_positive("q1")
    1
    """

    def n_positive(self, qid: str) -> int:
        """Number of documents judged relevant (> 0) for ``qid``."""
        return sum(1 for rel in self.get(qid, {}).values() if rel > 0)


class Run(dict):
    """A ranking: ``{qid: {docid: score}}``.

    The ranking of a query is the one trec_eval (and so pytrec_eval, ``evaluate`` and every stored
    result) scores: score descending, equal scores by document id descending (trec_eval compares the
    ids with ``strcmp``; Python's string order is the same for UTF-8). The order the inner dict
    happens to hold does not matter; every run r2med writes lists the documents in this order.

    >>> r = Run({"q1": {"a": 1.0, "b": 3.0, "c": 3.0}})
    >>> r.ranked("q1")
    [('c', 3.0), ('b', 3.0), ('a', 1.0)]
    >>> r.top_k(1)
    {'q1': {'c': 3.0}}
    """

    def __init__(self, *args, name: str = "r2med", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.name = name

    def ranked(self, qid: str) -> list[tuple[str, float]]:
        """Documents of ``qid`` in trec_eval's order: score descending, equal scores by document id descending."""
        return sorted(self.get(qid, {}).items(), key=lambda item: (item[1], item[0]), reverse=True)

    def top_k(self, k: int) -> Run:
        """A new run with the first ``k`` documents of each query in :meth:`ranked` order.

        When equal scores straddle the cut, the documents kept are the ones trec_eval ranks first
        (the larger document ids), so the cut run scores like the first ``k`` of the full run.
        """
        return Run({qid: dict(self.ranked(qid)[:k]) for qid in self}, name=self.name)


@dataclass(frozen=True)
class Scores:
    """Evaluation output: ``aggregate`` (official key -> mean over evaluated queries, unrounded)
    and ``per_query`` (qid -> official key -> value, unrounded)."""

    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def n_queries(self) -> int:
        return len(self.per_query)

    def rounded(self, digits: int = 5) -> dict[str, float]:
        """The aggregate rounded as the official result files store it."""
        return {key: round(value, digits) for key, value in self.aggregate.items()}


def exact_mean(values) -> float:
    """The mean of ``values`` computed in decimal from each value's shortest repr (independent of order): the one
    mean every table shows (``r2med run``'s average, the leaderboard's, the paper column's), rounded only for display.

    >>> exact_mean([0.1, 0.2]), (0.1 + 0.2) / 2
    (0.15, 0.15000000000000002)
    >>> exact_mean([0.26885] * 7 + [0.26884])  # 26.88 in every table, never 0.26885 -> 26.89
    0.26884875
    """
    from decimal import Decimal

    exact = [Decimal(repr(float(v))) for v in values]
    return float(sum(exact) / len(exact))
