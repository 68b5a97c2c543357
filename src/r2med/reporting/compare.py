"""Compare two systems dataset by dataset from their per-query metrics, with honest statistics.

A system is a result folder (``results/base retriever/bm25``: ``<Dataset>.per_query.jsonl`` and
``<Dataset>.json``, of R2MED's datasets or any other collection) or a published system
(``paper:gar/hyde/gpt4/nv``). The datasets compared are those either side holds (R2MED's first, in the
paper's order, then the others alphabetically; ``r2med.reporting.columns``) or those asked for; two
systems that share no dataset are an error naming each side's datasets. Per dataset: the mean
difference A - B, a paired permutation test, a paired t-test, a bootstrap confidence interval and
wins/ties/losses (``r2med.reporting.stats``); Holm's correction across the datasets tested; and
one pooled test over every paired query of those datasets (which weights datasets by their number
of queries, unlike the leaderboard's average).

Queries are paired by query id. A query that only one system has is dropped from that dataset's
test and counted (``only_a``/``only_b``) and logged. Where either side has only aggregate numbers
(the paper's rows, or a folder without per-query files) no test is possible: the difference of the
aggregates is shown and the test fields say why they are empty, nothing is invented.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError
from r2med.io.jsonsafe import JSONLimitError, loads
from r2med.manifest import MANIFEST_SUFFIX
from r2med.reporting.columns import choose_datasets, dataset_of
from r2med.reporting.leaderboard import RERUN_FIX
from r2med.reporting.official import PublishedSystem, is_published, normalise_metric, normalise_metrics, published
from r2med.reporting.paths import system_path
from r2med.reporting.stats import PairedTest, PendingTests, holm
from r2med.store.result_set import PER_QUERY_SUFFIX, RESULT_SUFFIX, read_result_file
from r2med.store.results import match_system

logger = logging.getLogger(__name__)

PAPER_PREFIX = "paper:"


@dataclass(frozen=True)
class SystemSource:
    """Where one side of a comparison comes from: a result folder or a published system."""

    label: str
    system: str
    directory: Path | None = None
    paper: PublishedSystem | None = None

    def _files(self, suffix: str) -> dict[str, Path]:
        """Dataset -> its file ``<Dataset><suffix>`` in the folder (R2MED's old names read as the public ones)."""
        if self.directory is None:
            return {}
        out: dict[str, Path] = {}
        for path in sorted(self.directory.glob(f"*{suffix}")):
            dataset = dataset_of(path.name[: -len(suffix)])
            if dataset is not None and path.is_file() and not path.name.endswith(MANIFEST_SUFFIX):
                out.setdefault(dataset, path)
        return out

    def datasets(self) -> list[str]:
        """The datasets this side has results on (aggregate or per-query)."""
        if self.paper is not None:
            return list(self.paper.scores)
        return list(dict.fromkeys([*self._files(RESULT_SUFFIX), *self._files(PER_QUERY_SUFFIX)]))

    def per_query(self, dataset: str, metric: str) -> dict[str, float] | None:
        """Query id -> value, or ``None`` when only aggregates exist."""
        path = self._files(PER_QUERY_SUFFIX).get(dataset)
        return None if path is None else read_per_query(path, metric)

    def aggregate(self, dataset: str, metric: str) -> float | None:
        key = normalise_metric(metric)
        if self.paper is not None:
            return self.paper.values(key).get(dataset)
        path = self._files(RESULT_SUFFIX).get(dataset)
        if path is None:
            return None
        record = _shown(path, _read_record)
        if not isinstance(record, dict) or not isinstance(record.get("test"), dict):  # another JSON file: no result
            return None
        return normalise_metrics(record["test"]).get(key)


def _read_record(path: Path) -> object:
    """A result JSON; past Python's limits (a 5,001-digit number, 100,000 levels) it is invalid input (exit 5)."""
    try:
        return loads(path.read_text(encoding="utf-8"))
    except JSONLimitError as exc:
        raise InvalidInputError(f"{path}: {exc}; fix or remove the file") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); fix or remove the file") from None


def read_per_query(path: Path, metric: str) -> dict[str, float]:
    """``{qid: value}`` of ``metric`` from a ``.per_query.jsonl`` (``{"qid": ..., "<metric>": ...}`` per line);
    verified against its result set's manifest when one is beside it."""
    return _shown(path, lambda p: _read_per_query(p, metric))


def _shown(path: Path, parse):
    """``read_result_file(path, parse)``; a file that does not match its manifest is DamagedFileError (exit 5) with
    the fix the leaderboard gives (run the system again)."""
    try:
        return read_result_file(path, parse)
    except DamagedFileError as exc:
        raise DamagedFileError(exc.path, exc.reason, RERUN_FIX) from None


def _read_per_query(path: Path, metric: str) -> dict[str, float]:
    key = normalise_metric(metric)
    values: dict[str, float] = {}
    problems: list[str] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{number}: not valid JSON ({exc.msg})")
                continue
            except JSONLimitError as exc:
                problems.append(f"{path}:{number}: {exc}")
                continue
            metrics = normalise_metrics(row) if isinstance(row, dict) else {}
            qid = row.get("qid") if isinstance(row, dict) else None
            if not isinstance(qid, str) or key not in metrics:
                have = ", ".join(sorted(metrics)) or "none"
                problems.append(f"{path}:{number}: expected {{\"qid\": \"...\", \"{key}\": <number>}}; metrics here: {have}")
            elif qid in values:
                problems.append(f"{path}:{number}: query {qid!r} appears twice")
            else:
                values[qid] = metrics[key]
    if problems:
        raise InvalidInputError(f"{path}: per-query values cannot be used", problems)
    return values


def resolve_system(spec: str, *, results: Path | None = None) -> SystemSource:
    """A system folder (a path, or a system path under ``results``) or ``paper:<published path>``."""
    if spec.startswith(PAPER_PREFIX):
        system = published(spec[len(PAPER_PREFIX):])
        return SystemSource(spec, system.path, paper=system)
    tried = [Path(spec)] + ([Path(results) / spec] if results is not None else [])
    for folder in tried:
        if folder.is_dir():
            return SystemSource(spec, system_path(folder, folder.parent), directory=folder)
    if results is not None and Path(results).is_dir():  # a short name: 'bm25' for 'base retriever/bm25'
        stored = sorted({p.parent.relative_to(results).as_posix() for p in Path(results).rglob("*.json")
                         if not p.name.endswith(".manifest.json")})
        key = match_system(spec, stored)
        if key is not None:
            folder = Path(results) / key
            return SystemSource(key, system_path(folder, folder.parent), directory=folder)
    if is_published(spec):
        system = published(spec)
        return SystemSource(spec, system.path, paper=system)
    raise MissingResourceError(
        f"system '{spec}' not found: no folder {' or '.join(str(t) for t in tried)}, and not a published path "
        "(see 'r2med leaderboard --with-paper --format json'); give a result folder, --results DIR with a system path, "
        "or paper:<path>"
    )


@dataclass(frozen=True)
class DatasetComparison:
    """A - B on one dataset; ``test`` is ``None`` (and ``reason`` says why) when no test is possible."""

    dataset: str
    mean_a: float | None
    mean_b: float | None
    test: PairedTest | None = None
    reason: str | None = None
    only_a: int = 0
    only_b: int = 0
    permutation_p_holm: float | None = None
    t_p_holm: float | None = None
    diffs: tuple[tuple[str, float], ...] = field(default=(), repr=False)

    @property
    def difference(self) -> float | None:
        if self.test is not None:
            return self.test.mean_diff
        return None if self.mean_a is None or self.mean_b is None else self.mean_a - self.mean_b


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    metric: str
    datasets: tuple[DatasetComparison, ...]
    pooled: PairedTest | None
    pooled_datasets: tuple[str, ...]
    pooled_reason: str | None = None


def _paired(a: dict[str, float], b: dict[str, float]) -> tuple[list[str], int, int]:
    common = [qid for qid in a if qid in b]
    return common, len(a) - len(common), len(b) - len(common)


def compare_systems(
    a: SystemSource,
    b: SystemSource,
    *,
    datasets: Sequence[str] | None = None,
    metric: str = "ndcg_at_10",
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Comparison:
    """Compare ``a`` with ``b`` on ``datasets`` (default: every dataset either side has; R2MED's old names and the
    words of :func:`r2med.reporting.columns.choose_datasets` are accepted). MissingResourceError when no dataset has
    a value of ``metric`` on both sides."""
    with start_comparison(a, b, datasets=datasets, metric=metric, n_resamples=n_resamples, seed=seed,
                          confidence=confidence) as pending:
        return pending.result()


@dataclass(frozen=True)
class _Tested:
    """A dataset whose paired test is pending: the number of its pair in the tests, and what else its row holds."""

    dataset: str
    index: int
    only_a: int
    only_b: int
    diffs: tuple[tuple[str, float], ...]


class PendingComparison:
    """:func:`compare_systems` with its paired tests under way (:class:`r2med.reporting.stats.PendingTests`): the
    files are read and checked when it is made; :meth:`result` is the comparison. A context manager, as the tests."""

    def __init__(self, a: str, b: str, key: str, rows: list[DatasetComparison | _Tested], tests: PendingTests,
                 pooled: int | None) -> None:
        self.a, self.b, self.key, self._rows, self.tests, self._pooled = a, b, key, rows, tests, pooled

    def result(self) -> Comparison:
        done = self.tests.result()
        rows = [r if isinstance(r, DatasetComparison) else
                DatasetComparison(r.dataset, done[r.index].mean_a, done[r.index].mean_b, done[r.index], None,
                                  r.only_a, r.only_b, diffs=r.diffs)
                for r in self._rows]
        tested = [r for r in rows if r.test is not None]
        perm_holm = holm([r.test.permutation_p for r in tested])  # type: ignore[union-attr]
        t_holm = holm([r.test.t_p for r in tested])  # type: ignore[union-attr]
        adjusted = {r.dataset: (p, t) for r, p, t in zip(tested, perm_holm, t_holm)}
        rows = [
            DatasetComparison(r.dataset, r.mean_a, r.mean_b, r.test, r.reason, r.only_a, r.only_b,
                              *adjusted.get(r.dataset, (None, None)), diffs=r.diffs)
            for r in rows
        ]
        pooled = None if self._pooled is None else done[self._pooled]
        pooled_reason = None if pooled else "no dataset has per-query values of both systems; no test is possible"
        return Comparison(self.a, self.b, self.key, tuple(rows), pooled, tuple(r.dataset for r in tested),
                          pooled_reason)

    def __enter__(self) -> "PendingComparison":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.tests.close()


def start_comparison(
    a: SystemSource,
    b: SystemSource,
    *,
    datasets: Sequence[str] | None = None,
    metric: str = "ndcg_at_10",
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
    meanwhile: bool = False,
) -> PendingComparison:
    """:func:`compare_systems`, its files read and checked now (the same errors) and its tests started
    (``meanwhile``: the caller has other work to do, so they may run in a worker; the numbers are the same)."""
    key = normalise_metric(metric)
    names = choose_datasets({*a.datasets(), *b.datasets()}, list(datasets) if datasets else None)
    rows: list[DatasetComparison | _Tested] = []
    pairs: list[tuple[list[float], list[float]]] = []
    pooled_a: list[float] = []
    pooled_b: list[float] = []
    for ds in names:
        qa, qb = a.per_query(ds, key), b.per_query(ds, key)
        if qa is not None and qb is not None:
            common, only_a, only_b = _paired(qa, qb)
            if only_a or only_b:
                logger.warning("%s: %d queries only in %s and %d only in %s are dropped from the paired test",
                               ds, only_a, a.label, only_b, b.label)
            if len(common) >= 2:
                xa, xb = [qa[q] for q in common], [qb[q] for q in common]
                pairs.append((xa, xb))
                pooled_a += xa
                pooled_b += xb
                diffs = tuple((q, qa[q] - qb[q]) for q in common)
                rows.append(_Tested(ds, len(pairs) - 1, only_a, only_b, diffs))
                continue
            reason = f"only {len(common)} queries in common; a paired test needs at least 2"
            rows.append(DatasetComparison(ds, None, None, None, reason, only_a, only_b))
            continue
        mean_a, mean_b = a.aggregate(ds, key), b.aggregate(ds, key)
        if mean_a is None and mean_b is None and not datasets:
            continue  # neither side ran this dataset and it was not asked for
        missing = [s for s, m in ((a, mean_a), (b, mean_b)) if m is None]
        if missing:
            reason = "no result for " + " and ".join(s.label for s in missing)
        else:
            aggregate_only = [s.label for s, q in ((a, qa), (b, qb)) if q is None]
            reason = (f"only aggregate numbers for {' and '.join(aggregate_only)} (no per-query values): "
                      "a paired test is not possible")
        rows.append(DatasetComparison(ds, mean_a, mean_b, None, reason))
    if not any(isinstance(r, _Tested) or (r.mean_a is not None and r.mean_b is not None) for r in rows):
        sides = "; ".join(f"{s.label} has {', '.join(_held(s, key)) or 'none'}" for s in (a, b))
        asked = f" among {', '.join(names)}" if datasets else ""
        raise MissingResourceError(f"{a.label} and {b.label} share no dataset with {key} results{asked}: {sides}")
    pooled = None
    if len(pooled_a) >= 2:
        pairs.append((pooled_a, pooled_b))
        pooled = len(pairs) - 1
    tests = PendingTests(pairs, meanwhile=meanwhile, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return PendingComparison(a.label, b.label, key, rows, tests, pooled)


def _held(side: SystemSource, key: str) -> list[str]:
    """The datasets on which ``side`` has a value of ``key``, in table order."""
    have = [ds for ds in side.datasets() if side.aggregate(ds, key) is not None or side.per_query(ds, key) is not None]
    return choose_datasets(have, ["all"]) if have else []


def _p(value: float | None) -> str:
    """A p-value for a table.

    >>> _p(0.00001), _p(0.01234), _p(None)
    ('<0.0001', '0.0123', '-')
    """
    if value is None:
        return "-"
    return "<0.0001" if value < 0.0001 else f"{value:.4f}"


def _pts(value: float | None, sign: bool = False) -> str:
    """A value x100 by the one display rule of every table: rounded to 5 decimals as result files are, then half up
    (``reporting.tables.pct``), so a mean of per-query values shows as its result file does.

    >>> _pts(0.67075), _pts(0.6707499999999999), _pts(-0.01075, sign=True), _pts(0.0, sign=True), _pts(None)
    ('67.08', '67.08', '-1.08', '+0.00', '-')
    """
    from r2med.reporting.tables import pct

    if value is None:
        return "-"
    shown = pct(abs(round(value, 5)))
    if not sign:
        return shown if value >= 0 else f"-{shown}"
    return f"{'-' if round(value, 5) < 0 else '+'}{shown}"


def comparison_rows(cmp: Comparison) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the comparison table (values x100)."""
    headers = ["dataset", "n", "A", "B", "A-B", "95% CI", "perm p", "Holm p", "t-test p", "W/T/L", "note"]
    if cmp.datasets and cmp.datasets[0].test is not None:
        headers[5] = f"{round(100 * cmp.datasets[0].test.confidence)}% CI"
    body = []
    for r in cmp.datasets:
        t = r.test
        dropped = f"{r.only_a} only in A, {r.only_b} only in B dropped" if (r.only_a or r.only_b) else ""
        body.append([
            r.dataset, str(t.n) if t else "-", _pts(r.mean_a), _pts(r.mean_b), _pts(r.difference, sign=True),
            f"[{_pts(t.ci_low, True)}, {_pts(t.ci_high, True)}]" if t else "-", _p(t.permutation_p if t else None),
            _p(r.permutation_p_holm), _p(t.t_p if t else None), f"{t.wins}/{t.ties}/{t.losses}" if t else "-",
            "; ".join(x for x in (r.reason or "", dropped) if x),
        ])
    if cmp.pooled is not None:
        t = cmp.pooled
        body.append([f"pooled ({len(cmp.pooled_datasets)} datasets)", str(t.n), _pts(t.mean_a), _pts(t.mean_b),
                     _pts(t.mean_diff, True), f"[{_pts(t.ci_low, True)}, {_pts(t.ci_high, True)}]",
                     _p(t.permutation_p), "-", _p(t.t_p), f"{t.wins}/{t.ties}/{t.losses}", "all paired queries"])
    return headers, body


def format_comparison(cmp: Comparison, fmt: str = "md") -> str:
    """The comparison as a Markdown table with a legend (``md``; labels, datasets and notes HTML-escaped)
    or as JSON (``json``, unrounded)."""
    if fmt == "json":
        return json.dumps(comparison_dict(cmp), indent=2, ensure_ascii=False)
    from r2med.reporting.tables import markdown_table, md_text

    headers, body = comparison_rows(cmp)
    body = [[md_text(row[0]), *row[1:-1], md_text(row[-1])] for row in body]  # dataset and note: text; the rest numbers
    t = next((r.test for r in cmp.datasets if r.test), cmp.pooled)
    method = (f"; {t.n_resamples} resamples, seed {t.seed}, bootstrap {t.ci_method}" if t else "")
    legend = (f"{cmp.metric} x100, paired by query id. perm p: paired randomization test; Holm p: perm p adjusted "
              f"(Holm) over the {len(cmp.pooled_datasets)} datasets tested; t-test p: paired t-test; "
              f"CI: paired bootstrap of the mean difference{method}; W/T/L: queries where A is above/equal/below B.")
    if t is None:
        legend = f"{cmp.metric} x100. A-B: difference of the aggregate numbers; no paired test was possible."
    lines = [f"A = {md_text(cmp.a)}", f"B = {md_text(cmp.b)}", "",
             markdown_table(headers, body, align_right=[False] + [True] * 9 + [False]), "", legend]
    if cmp.pooled_reason:
        lines.append(f"Pooled: {md_text(cmp.pooled_reason)}.")
    return "\n".join(lines)


def comparison_dict(cmp: Comparison) -> dict:
    return {
        "a": cmp.a, "b": cmp.b, "metric": cmp.metric,
        "datasets": [
            {"dataset": r.dataset, "mean_a": r.mean_a, "mean_b": r.mean_b, "difference": r.difference,
             "test": r.test.as_dict() if r.test else None, "permutation_p_holm": r.permutation_p_holm,
             "t_p_holm": r.t_p_holm, "only_a": r.only_a, "only_b": r.only_b, "reason": r.reason}
            for r in cmp.datasets
        ],
        "pooled": cmp.pooled.as_dict() if cmp.pooled else None,
        "pooled_datasets": list(cmp.pooled_datasets),
        "pooled_reason": cmp.pooled_reason,
    }
