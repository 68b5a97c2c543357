"""Evaluation with R2MED's exact conventions, through pytrec_eval (trec_eval semantics).

Official measures: ``ndcg_cut``, ``map_cut``, ``recall``, ``P`` at 1, 10, 25, 50, 100 and
``recip_rank``, reported under the official keys (``ndcg_at_10``, ``map_at_10``, ``recall_at_100``,
``precision_at_1``, ``mrr``). Per-query values are averaged over the queries pytrec_eval returns
(queries in both qrels and run); result files round the means to 5 decimals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from r2med.errors import InvalidInputError, UsageError
from r2med.io.ids import first_bad_id
from r2med.types import Qrels, Run, Scores

DEFAULT_CUTOFFS = (1, 10, 25, 50, 100)

#: official key prefix -> pytrec_eval measure family
FAMILIES = {"ndcg_at": "ndcg_cut", "map_at": "map_cut", "recall_at": "recall", "precision_at": "P"}
_TREC_TO_KEY = {trec: key for key, trec in FAMILIES.items()}
_KEY_RE = re.compile(r"^(ndcg_at|map_at|recall_at|precision_at)_(\d+)$")


def official_key(trec_measure: str) -> str:
    """Official result-file key of a pytrec_eval measure.

    >>> official_key("ndcg_cut_10"), official_key("P_1"), official_key("recip_rank")
    ('ndcg_at_10', 'precision_at_1', 'mrr')
    """
    if trec_measure == "recip_rank":
        return "mrr"
    family, _, cutoff = trec_measure.rpartition("_")
    return f"{_TREC_TO_KEY[family]}_{cutoff}"


def parse_metrics(names: Iterable[str] | None, cutoffs: Iterable[int] | None = None) -> list[str]:
    """Official keys to compute, in the official order (ndcg, map, recall, precision at each cutoff; mrr).

    ``names`` may hold full keys (``ndcg_at_10``) or families (``ndcg``, ``map``, ``recall``,
    ``precision``, ``mrr``) that expand over ``cutoffs`` (default 1, 10, 25, 50, 100).

    >>> parse_metrics(["ndcg_at_10", "mrr"])
    ['ndcg_at_10', 'mrr']
    >>> parse_metrics(["recall"], cutoffs=[5, 20])
    ['recall_at_5', 'recall_at_20']
    >>> parse_metrics(None, cutoffs=[10])
    ['ndcg_at_10', 'map_at_10', 'recall_at_10', 'precision_at_10', 'mrr']
    """
    ks = sorted(set(cutoffs)) if cutoffs else list(DEFAULT_CUTOFFS)
    if any(k <= 0 for k in ks):
        raise UsageError(f"cutoffs must be positive integers, got {ks}")
    wanted: set[str] = set()
    for raw in names or ["ndcg", "map", "recall", "precision", "mrr"]:
        name = raw.strip().lower()
        if name in ("mrr", "recip_rank"):
            wanted.add("mrr")
        elif f"{name}_at" in FAMILIES:
            wanted.update(f"{name}_at_{k}" for k in ks)
        elif _KEY_RE.match(name) and int(_KEY_RE.match(name).group(2)) > 0:  # type: ignore[union-attr]
            wanted.add(name)
        else:
            raise UsageError(
                f"unknown metric '{raw}'; use ndcg_at_K, map_at_K, recall_at_K, precision_at_K, mrr "
                "or a family name (ndcg, map, recall, precision) with --cutoffs"
            )
    order = {family: i for i, family in enumerate(FAMILIES)}

    def sort_key(key: str) -> tuple[int, int]:
        if key == "mrr":
            return (len(order), 0)
        family, _, k = key.rpartition("_")
        return (order[family], int(k))

    return sorted(wanted, key=sort_key)


def _trec_measures(keys: list[str]) -> set[str]:
    by_family: dict[str, list[int]] = {}
    measures = set()
    for key in keys:
        if key == "mrr":
            measures.add("recip_rank")
            continue
        family, _, k = key.rpartition("_")
        by_family.setdefault(FAMILIES[family], []).append(int(k))
    for trec, ks in by_family.items():
        measures.add(f"{trec}." + ",".join(str(k) for k in sorted(set(ks))))
    return measures


def drop_identical_ids(run: Mapping[str, Mapping[str, float]]) -> Run:
    """A copy of ``run`` without documents whose id equals the query id (BEIR's ``ignore_identical_ids``).

    >>> drop_identical_ids({"1": {"1": 9.0, "2": 1.0}})
    {'1': {'2': 1.0}}
    """
    return Run({qid: {did: s for did, s in docs.items() if did != qid} for qid, docs in run.items()})


def _first(ids: Iterable[str], n: int = 3) -> str:
    """The first ``n`` ids (repr) and how many more.

    >>> _first(["1", "2", "3", "4", "5"]), _first([])
    ("'1', '2', '3' and 2 more", 'none')
    """
    ids = list(ids)
    shown = ", ".join(repr(i) for i in ids[:n])
    more = f" and {len(ids) - n} more" if len(ids) > n else ""
    return (shown + more) if ids else "none"


def check_scorable(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]) -> None:
    """InvalidInputError (exit 5) unless ``run`` can be scored against ``qrels`` to a meaningful number.

    Nothing to score is not a score: with no query in common the mean would be a silent 0.0. Ids must
    pass the id rule (:mod:`r2med.io.ids`; pytrec_eval cuts an id at a NUL, so ``d1\\x00x`` would be
    judged as ``d1``) and scores must not be NaN (their order is undefined).

    >>> check_scorable({"1": {"d": 1}}, {"2": {"d": 1.0}})
    Traceback (most recent call last):
    ...
    r2med.errors.InvalidInputError: nothing to score: no query of the qrels is in the run (qrels: '1'; run: '2'); check that both belong to the same dataset and use the same query ids
    """
    for what, ids in (("qrels", qrels), ("run", run)):
        bad = first_bad_id(ids)
        if bad is not None:
            raise InvalidInputError(f"query id {bad[0]!r} in the {what} {bad[1]}; pytrec_eval cannot score it: fix the id")
    for what, table in (("qrels", qrels), ("run", run)):
        for qid, docs in table.items():
            bad = first_bad_id(docs)
            if bad is not None:
                raise InvalidInputError(f"document id {bad[0]!r} of query {qid!r} in the {what} {bad[1]}; "
                                        "pytrec_eval cannot score it: fix the id")
    for qid, docs in run.items():
        for did, score in docs.items():
            if math.isnan(score):
                raise InvalidInputError(f"query {qid!r}, document {did!r}: the score is NaN; a ranking needs numbers")
    if not qrels:
        raise InvalidInputError("nothing to score: the qrels hold no judgements")
    if not any(qid in run for qid in qrels):
        raise InvalidInputError(
            f"nothing to score: no query of the qrels is in the run (qrels: {_first(qrels)}; run: {_first(run)}); "
            "check that both belong to the same dataset and use the same query ids"
        )


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    *,
    metrics: Iterable[str] | None = None,
    cutoffs: Iterable[int] | None = None,
    judged_all: bool = False,
    ignore_identical_ids: bool = False,
) -> Scores:
    """Score ``run`` against ``qrels``; inputs are not modified.

    - ``judged_all``: judged queries missing from the run count as 0 (``trec_eval -c``); by default
      only queries present in both are averaged, as R2MED's official numbers are.
    - ``ignore_identical_ids``: drop documents whose id equals the query id first (BEIR's rule,
      used for the official dense numbers).

    InvalidInputError (exit 5) when there is nothing to score (no query of the qrels in the run), an
    id breaks the id rule or a score is NaN (:func:`check_scorable`): never a silent 0.0.

    >>> s = evaluate({"q": {"a": 1}}, {"q": {"b": 2.0, "a": 1.0}}, metrics=["precision_at_1", "mrr"])
    >>> s.aggregate
    {'precision_at_1': 0.0, 'mrr': 0.5}
    """
    import pytrec_eval

    keys = parse_metrics(metrics, cutoffs)
    clean_qrels = {str(q): {str(d): int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    clean_run = {str(q): {str(d): float(s) for d, s in docs.items()} for q, docs in run.items()}
    check_scorable(clean_qrels, clean_run)
    if ignore_identical_ids:
        clean_run = dict(drop_identical_ids(clean_run))
    evaluator = pytrec_eval.RelevanceEvaluator(clean_qrels, _trec_measures(keys))
    raw = evaluator.evaluate(clean_run)
    per_query = {qid: {key: 0.0 for key in keys} for qid in raw}
    for qid, values in raw.items():
        for trec_measure, value in values.items():
            key = official_key(trec_measure)
            if key in per_query[qid]:
                per_query[qid][key] = value
    if judged_all:
        for qid in clean_qrels:
            per_query.setdefault(qid, {key: 0.0 for key in keys})
    n = len(per_query)
    aggregate = {key: (sum(v[key] for v in per_query.values()) / n if n else 0.0) for key in keys}
    return Scores(aggregate=aggregate, per_query=per_query)


__all__ = ["DEFAULT_CUTOFFS", "Qrels", "Run", "Scores", "drop_identical_ids", "evaluate", "official_key", "parse_metrics"]
