"""The leaderboard: systems x the 8 datasets (+ average), from result directories and the paper.

Result directories are read as they are, whether written by r2med or the official repository's
``results/`` tree: every ``<Dataset>.json`` holding a ``"test"`` object is one (system, dataset)
result. The system is the file's folder from its ``base retriever`` / ``gar`` / ``reranker``
level on (``gar/hyde/gpt4/nv``); the official tree's ``reranker/<short>/top_<k>`` is read as the
published ``reranker/<name>/nv/top_<k>``. Dataset names may be public or the authors' old ones
(``Stack-Biology``, ``PMCPatients``, ...); files of other collections (``BEIR_NFCorpus.json``) are
skipped. Metric keys are read in either official style (``ndcg_at_10``, ``NDCG@10``).

A row's average is the mean over the 8 datasets; a system missing datasets shows its coverage
(``6/8``) and no average, and is ranked after the complete ones (by coverage, then by the mean of
what it has). Values are shown x100 with 2 decimals, rounded half up in decimal arithmetic, and
averages are computed exactly in decimal from each value as written (order-independent): for
published 5-decimal values that is the arithmetic the paper's table shows (e.g. a mean of exactly
0.268850 is 26.89, where binary floating point would print 26.88).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from r2med.datasets.catalog import catalog, dataset_names
from r2med.errors import DamagedFileError, InvalidInputError, MissingResourceError, UsageError
from r2med.manifest import MANIFEST_SUFFIX, read_result_file
from r2med.reporting.official import display_name, normalise_metric, normalise_metrics, published_systems
from r2med.reporting.paths import system_path
from r2med.reporting.render import render_template
from r2med.reporting.tables import csv_text, markdown_table, md_text, pct

logger = logging.getLogger(__name__)

PAPER = "paper"


@dataclass(frozen=True)
class SystemResults:
    """Everything known about one system from one source (a result directory or the paper)."""

    system: str
    source: str
    scores: Mapping[str, Mapping[str, float]]
    directory: Path | None = None
    files: Mapping[str, Path] = field(default_factory=dict)
    note: str | None = None

    @property
    def published(self) -> bool:
        return self.source == PAPER

    @property
    def name(self) -> str:
        return display_name(self.system)


def _dataset_of(path: Path, record: dict) -> str | None:
    for candidate in (path.stem, record.get("dataset_name")):
        if isinstance(candidate, str) and candidate in catalog():
            return catalog().canonical(candidate)
    return None


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def discover(root: Path) -> list[SystemResults]:
    """Every system with result files under ``root`` (sorted by path); InvalidInputError lists bad files.

    A result JSON with a manifest beside it is read only when its result set matches the manifest's checksums
    (one that does not is listed as a bad file); one without (the official files) is read as it is.
    """
    root = Path(root)
    if not root.is_dir():
        raise MissingResourceError(f"result directory {root} does not exist (expected e.g. results/ written by 'r2med run')")
    found: dict[str, dict[str, tuple[Path, dict[str, float]]]] = {}
    folders: dict[str, Path] = {}
    problems: list[str] = []
    for path in sorted(root.rglob("*.json")):
        if path.name.startswith(".") or path.name.endswith(MANIFEST_SUFFIX) or not path.is_file():
            continue
        try:
            record = read_result_file(path, _read_json)
        except DamagedFileError as exc:
            problems.append(f"{exc}; run that system again, or remove its files")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); fix or remove the file")
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot be read ({exc})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("test"), dict):
            logger.debug("%s: no 'test' object, not a result file; skipped", path)
            continue
        dataset = _dataset_of(path, record)
        if dataset is None:
            logger.info("%s: not one of the R2MED datasets (%s); skipped", path, ", ".join(dataset_names()))
            continue
        metrics = normalise_metrics(record["test"])
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        if bad:
            problems.append(f"{path}: metric {bad[0]!r} is {metrics[bad[0]]}; a result must be a finite number")
            continue
        system = system_path(path.parent, root)
        seen = found.setdefault(system, {})
        if dataset in seen:
            problems.append(f"{path}: a second result for {system} on {dataset} (first: {seen[dataset][0]}); keep one")
            continue
        seen[dataset] = (path, metrics)
        folders.setdefault(system, path.parent)
    if problems:
        raise InvalidInputError(f"{root}: {len(problems)} result files cannot be used", problems)
    return [
        SystemResults(system, str(root), {ds: m for ds, (_, m) in by_ds.items()}, folders[system],
                      {ds: p for ds, (p, _) in by_ds.items()})
        for system, by_ds in sorted(found.items())
    ]


def paper_results() -> list[SystemResults]:
    """The 71 published systems as ``SystemResults`` (source ``paper``)."""
    return [SystemResults(p.path, PAPER, p.scores, note=p.note) for p in published_systems()]


@dataclass(frozen=True)
class Row:
    """One leaderboard row: a system's values (0-1) of one metric on the datasets it has."""

    system: str
    name: str
    source: str
    values: Mapping[str, float]
    note: str | None = None

    @property
    def published(self) -> bool:
        return self.source == PAPER

    @property
    def coverage(self) -> int:
        return sum(1 for ds in dataset_names() if ds in self.values)

    @property
    def complete(self) -> bool:
        return self.coverage == len(dataset_names())

    @property
    def covered_mean(self) -> float | None:
        """Mean over the datasets it has (``None`` without any)."""
        have = [self.values[ds] for ds in dataset_names() if ds in self.values]
        return exact_mean(have) if have else None

    @property
    def average(self) -> float | None:
        """Mean over the 8 datasets; ``None`` unless the system has all 8."""
        return self.covered_mean if self.complete else None


def build_rows(systems: Iterable[SystemResults], metric: str = "ndcg_at_10") -> list[Row]:
    """Rows for ``metric``, complete systems first by average, then by coverage and covered mean.

    >>> a = SystemResults("a", "dir", {"Biology": {"ndcg_at_10": 0.5}})
    >>> b = SystemResults("b", "dir", {"Biology": {"NDCG@10": 0.7}, "MedQA-Diag": {"ndcg_at_10": 0.1}})
    >>> [(r.system, r.coverage, round(r.covered_mean, 2), r.average) for r in build_rows([a, b])]
    [('b', 2, 0.4, None), ('a', 1, 0.5, None)]
    """
    key = normalise_metric(metric)
    rows = []
    for s in systems:
        values = {ds: normalise_metrics(m)[key] for ds, m in s.scores.items() if key in normalise_metrics(m)}
        if values:
            rows.append(Row(s.system, s.name, s.source, values, s.note))
    return sorted(rows, key=lambda r: (-r.coverage, -(r.covered_mean or 0.0), r.system, r.source))


def collect(result_dirs: Sequence[Path], *, with_paper: bool = False, metric: str = "ndcg_at_10") -> list[Row]:
    """Leaderboard rows of ``result_dirs`` (and the paper's systems with ``with_paper``)."""
    systems: list[SystemResults] = []
    for root in result_dirs:
        found = discover(Path(root))
        if not found:
            logger.warning("%s: no result files of the R2MED datasets found", root)
        systems.extend(found)
    if with_paper:
        systems.extend(paper_results())
    if not systems:
        raise MissingResourceError(
            "no results to show: give result directories (written by 'r2med run' or the official results/ tree) "
            "or --with-paper"
        )
    rows = build_rows(systems, metric)
    if not rows:
        have = sorted({k for s in systems for m in s.scores.values() for k in normalise_metrics(m)})
        raise UsageError(f"no result has the metric '{metric}'; available: {', '.join(have)}")
    return rows


def exact_mean(values: Sequence[float]) -> float:
    """The mean of ``values`` computed in decimal from each value's shortest repr (independent of order).

    >>> exact_mean([0.1, 0.2]), (0.1 + 0.2) / 2
    (0.15, 0.15000000000000002)
    """
    exact = [Decimal(repr(float(v))) for v in values]
    return float(sum(exact) / len(exact))


def board(rows: Sequence[Row], metric: str) -> dict:
    """The table as plain data (what every format renders): headers, cells, best per column, notes."""
    datasets = dataset_names()
    columns: dict[str, list[float]] = {ds: [r.values[ds] for r in rows if ds in r.values] for ds in datasets}
    columns["average"] = [r.average for r in rows if r.average is not None]
    best = {col: max(vals) for col, vals in columns.items() if vals}
    body = []
    for rank, row in enumerate(rows, start=1):
        cells = [(pct(row.values.get(ds)), ds in row.values and row.values[ds] == best.get(ds)) for ds in datasets]
        cells.append((pct(row.average), row.average is not None and row.average == best.get("average")))
        body.append({"rank": rank, "name": row.name, "system": row.system, "source": row.source,
                     "published": row.published, "cells": cells, "coverage": f"{row.coverage}/{len(datasets)}",
                     "complete": row.complete, "covered_mean": pct(row.covered_mean)})
    shown_notes = {f"{r.name} ({r.source})": r.note for r in rows if r.note}
    return {"metric": normalise_metric(metric), "datasets": datasets, "rows": body, "notes": shown_notes}


def legend_text(metric: str) -> str:
    """What the table's columns mean (printed under every format that has room for it)."""
    return (f"{metric} x100. Avg: mean over the 8 datasets, only for systems with all 8; "
            "coverage n/8 counts the datasets a system has ('-' = no result). source 'paper' = published numbers.")


def to_markdown(rows: Sequence[Row], metric: str) -> str:
    """The table in Markdown; names, paths, sources and notes are HTML-escaped (:func:`md_text`)."""
    data = board(rows, metric)
    headers = ["#", "system", "path", "source", *data["datasets"], "Avg", "coverage"]
    body = [[r["rank"], md_text(r["name"]), md_text(r["system"]), md_text(r["source"]), *[c for c, _ in r["cells"]],
             r["coverage"]] for r in data["rows"]]
    right = [True, False, False, False] + [True] * (len(data["datasets"]) + 2)
    lines = [markdown_table(headers, body, align_right=right), "", legend_text(data["metric"])]
    lines += [f"Note, {md_text(who)}: {md_text(text)}" for who, text in data["notes"].items()]
    return "\n".join(lines)


def to_csv(rows: Sequence[Row], metric: str) -> str:
    """The table as CSV (:func:`csv_text`): formula-looking text made inert, numbers kept, RFC 4180 quoting."""
    data = board(rows, metric)
    table: list[list[object]] = [["rank", "system", "path", "source", *data["datasets"], "average", "coverage"]]
    for r in data["rows"]:
        table.append([r["rank"], r["name"], r["system"], r["source"], *[("" if c == "-" else c) for c, _ in r["cells"]],
                      r["coverage"]])
    return csv_text(table)


def to_json(rows: Sequence[Row], metric: str) -> str:
    """Unrounded values (0-1) per row; ``average`` is null for incomplete systems."""
    payload = {
        "metric": normalise_metric(metric),
        "datasets": dataset_names(),
        "rows": [
            {"system": r.system, "name": r.name, "source": r.source, "published": r.published,
             "values": {ds: r.values.get(ds) for ds in dataset_names()}, "average": r.average,
             "coverage": r.coverage, "covered_mean": r.covered_mean, "note": r.note}
            for r in rows
        ],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _template(name: str):
    """A formatter that renders the ``board`` through a packaged template (jinja2, the ``report`` extra)."""

    def render(rows: Sequence[Row], metric: str) -> str:
        data = board(rows, metric)
        return render_template(name, board=data, legend=legend_text(data["metric"]))

    return render


#: Format name -> formatter ``(rows, metric) -> text``; the order is the one ``--format`` lists.
FORMATTERS: dict[str, Callable[[Sequence[Row], str], str]] = {
    "md": to_markdown,
    "csv": to_csv,
    "latex": _template("leaderboard.tex.j2"),
    "html": _template("leaderboard.html.j2"),
    "json": to_json,
}
FORMATS = tuple(FORMATTERS)


def format_leaderboard(rows: Sequence[Row], fmt: str = "md", *, metric: str = "ndcg_at_10") -> str:
    """Render ``rows`` as ``md``, ``csv``, ``latex``, ``html`` (a standalone page) or ``json``."""
    formatter = FORMATTERS.get(fmt)
    if formatter is None:
        raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(FORMATS)}")
    return formatter(rows, metric)
