"""The leaderboard's rows rendered: the table as plain data (:func:`board`), its legend and notes, and the formats
``r2med leaderboard --format`` writes (Markdown, CSV, LaTeX, HTML, JSON).

The rows come from :mod:`r2med.reporting.leaderboard` (what a table holds, ranked); this module only shows them:
values x100 with 2 decimals (:func:`~r2med.reporting.tables.pct`), the best of each column marked, a note per row
that has one, and the public leaderboard's averages beside the computed ones when the rows carry them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from r2med.datasets.catalog import dataset_names
from r2med.errors import UsageError
from r2med.reporting.columns import Breakdown, average_label
from r2med.reporting.leaderboard import LEADERBOARD, Refused, Row, shown_datasets
from r2med.reporting.official import normalise_metric
from r2med.reporting.render import render_template
from r2med.reporting.tables import csv_text, markdown_table, md_label, md_text, pct


def board(rows: Sequence[Row], metric: str, breakdown: Breakdown | None = None,
          refused: Sequence[Refused] = ()) -> dict:
    """The table as plain data (what every format renders): headers, cells, best per column, notes.

    The value columns are the datasets shown, or with ``breakdown`` its groups (tasks, body systems); the
    average and the coverage are always over the datasets shown. ``refused``: the systems left out because their
    results cannot be used, each named in a note with why (a table never goes without saying what it left out).
    """
    datasets = shown_datasets(rows)
    columns = list(breakdown.columns) if breakdown else list(datasets)

    def values(row: Row) -> Mapping[str, float]:
        return breakdown.values.get((row.system, row.source), {}) if breakdown else row.values

    best = {c: max(vals) for c in columns if (vals := [values(r)[c] for r in rows if c in values(r)])}
    best_average = max((r.shown_average for r in rows if r.shown_average is not None), default=None)
    listed = any(r.listed is not None for r in rows)
    body = []
    for rank, row in enumerate(rows, start=1):
        have = values(row)
        cells = [(pct(have.get(c)), c in have and have[c] == best.get(c)) for c in columns]
        cells.append((pct(row.shown_average), row.shown_average is not None and row.shown_average == best_average))
        body.append({"rank": rank, "name": row.name, "system": row.system, "source": row.source,
                     "published": row.published, "cells": cells, "coverage": f"{row.coverage}/{len(datasets)}",
                     "complete": row.complete, "covered_mean": pct(row.covered_mean), "listed": pct(row.listed),
                     "average_only": row.average_only})
    shown_notes = {}
    for r in rows:
        text = "; ".join(t for t in (r.note, listed_difference(r)) if t)
        if text:
            shown_notes[f"{r.name} ({r.source})"] = text
    only = [r for r in rows if r.average_only]
    if only:
        shown_notes[f"{len(only)} rows of source '{LEADERBOARD}'"] = (
            "R2MED's public leaderboard lists only their average; no per-dataset numbers are published, so each "
            "dataset shows '-' and the average is the leaderboard's")
    for r in refused:
        shown_notes[f"left out, {r.system}"] = "its results cannot be used: " + "; and ".join(r.problems)
    return {"metric": normalise_metric(metric), "datasets": list(datasets), "columns": columns,
            "by": breakdown.by if breakdown else "dataset", "average_label": average_label(datasets),
            "rows": body, "notes": shown_notes, "listed": listed}


def listed_difference(row: Row) -> str | None:
    """A note for a published row whose leaderboard average differs, as printed, from the mean of its published
    per-dataset numbers (None when they agree or the row is not on the leaderboard)."""
    if row.listed is None or row.average_only or row.average is None or pct(row.listed) == pct(row.average):
        return None
    gap = abs(Decimal(pct(row.listed)) - Decimal(pct(row.average)))
    why = ("a rounding difference" if gap <= Decimal("0.01")
           else "the leaderboard's number has no per-dataset numbers behind it")
    return (f"the leaderboard lists {pct(row.listed)}, the mean of the published per-dataset numbers is "
            f"{pct(row.average)} ({gap} apart: {why})")


def legend_text(metric: str, datasets: Sequence[str] | None = None, breakdown: Breakdown | None = None) -> str:
    """What the table's columns mean (printed under every format that has room for it)."""
    shown = list(dataset_names() if datasets is None else datasets)
    n = len(shown)
    if shown == dataset_names():
        over = "the 8 datasets, only for systems with all 8"
    else:
        over = f"the {n} dataset{'' if n == 1 else 's'} shown ({', '.join(shown)}), only for systems with all of them"
    text = (f"{metric} x100. {average_label(shown)}: mean over {over}; coverage n/{n} counts the datasets a system "
            "has ('-' = no result). source 'paper' = published numbers.")
    return f"{breakdown.legend} {text}" if breakdown else text


def _legend(data: dict, breakdown: Breakdown | None) -> str:
    text = legend_text(data["metric"], data["datasets"], breakdown)
    if data.get("listed"):
        text += (f" leaderboard = the average R2MED's public leaderboard lists; source '{LEADERBOARD}' = a row only "
                 "the leaderboard has (its average, no per-dataset numbers).")
    return text


def to_markdown(rows: Sequence[Row], metric: str, breakdown: Breakdown | None = None,
                refused: Sequence[Refused] = ()) -> str:
    """The table in Markdown; names, paths, sources and notes are HTML-escaped (:func:`md_text`)."""
    data = board(rows, metric, breakdown, refused)
    extra = ["leaderboard"] if data["listed"] else []
    headers = ["#", "system", "path", "source", *(md_label(c) for c in data["columns"]), data["average_label"], *extra,
               "coverage"]
    body = [[r["rank"], md_text(r["name"]), md_text(r["system"]), md_text(r["source"]), *[c for c, _ in r["cells"]],
             *([r["listed"]] if extra else []), r["coverage"]] for r in data["rows"]]
    right = [True, False, False, False] + [True] * (len(data["columns"]) + 2 + len(extra))
    lines = [markdown_table(headers, body, align_right=right), "", md_label(_legend(data, breakdown))]
    lines += [f"Note, {md_text(who)}: {md_text(text)}" for who, text in data["notes"].items()]
    return "\n".join(lines)


def to_csv(rows: Sequence[Row], metric: str, breakdown: Breakdown | None = None,
           refused: Sequence[Refused] = ()) -> str:
    """The table as CSV (:func:`csv_text`): formula-looking text made inert, numbers kept, RFC 4180 quoting; a
    system left out is a row of source ``refused`` with no values and its reason in the coverage column's place."""
    data = board(rows, metric, breakdown, refused)
    extra = ["leaderboard_average"] if data["listed"] else []
    table: list[list[object]] = [["rank", "system", "path", "source", *data["columns"], "average", *extra, "coverage"]]
    for r in data["rows"]:
        table.append([r["rank"], r["name"], r["system"], r["source"], *[("" if c == "-" else c) for c, _ in r["cells"]],
                      *([("" if r["listed"] == "-" else r["listed"])] if extra else []), r["coverage"]])
    for r in refused:
        table.append(["", r.system, r.system, "refused", *[""] * (len(data["columns"]) + 1 + len(extra)),
                      "its results cannot be used: " + "; and ".join(r.problems)])
    return csv_text(table)


def to_json(rows: Sequence[Row], metric: str, breakdown: Breakdown | None = None,
            refused: Sequence[Refused] = ()) -> str:
    """Unrounded values (0-1) per row; ``average`` (over the datasets shown) is null for incomplete systems; with a
    breakdown, ``groups`` holds each row's group values and ``members`` what each group holds; ``refused`` (only
    when some are) the systems left out, each with its problems."""
    datasets = shown_datasets(rows)
    payload: dict = {
        "metric": normalise_metric(metric),
        "datasets": list(datasets),
        "average_over": list(datasets),
        "rows": [
            {"system": r.system, "name": r.name, "source": r.source, "published": r.published,
             "values": {ds: r.values.get(ds) for ds in datasets}, "average": r.average,
             "coverage": r.coverage, "covered_mean": r.covered_mean, "note": r.note,
             **({"leaderboard_average": r.listed, "average_only": r.average_only,
                 "leaderboard_note": listed_difference(r)} if any(x.listed is not None for x in rows) else {})}
            for r in rows
        ],
    }
    if breakdown:
        payload.update(by=breakdown.by, groups=list(breakdown.columns),
                       members={c: list(m) for c, m in breakdown.members.items()}, legend=breakdown.legend)
        for out, r in zip(payload["rows"], rows):
            have = breakdown.values.get((r.system, r.source), {})
            out["groups"] = {c: have.get(c) for c in breakdown.columns}
    if refused:
        payload["refused"] = [{"system": r.system, "result_dir": str(r.root), "problems": list(r.problems)}
                              for r in refused]
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _template(name: str):
    """A formatter that renders the ``board`` through a packaged template (jinja2, the ``report`` extra)."""

    def render(rows: Sequence[Row], metric: str, breakdown: Breakdown | None = None,
               refused: Sequence[Refused] = ()) -> str:
        data = board(rows, metric, breakdown, refused)
        return render_template(name, board=data, legend=_legend(data, breakdown))

    return render


#: Format name -> formatter ``(rows, metric, breakdown) -> text``; the order is the one ``--format`` lists.
FORMATTERS: dict[str, Callable[..., str]] = {
    "md": to_markdown,
    "csv": to_csv,
    "latex": _template("leaderboard.tex.j2"),
    "html": _template("leaderboard.html.j2"),
    "json": to_json,
}
FORMATS = tuple(FORMATTERS)


def format_leaderboard(rows: Sequence[Row], fmt: str = "md", *, metric: str = "ndcg_at_10",
                       breakdown: Breakdown | None = None, refused: Sequence[Refused] = ()) -> str:
    """Render ``rows`` as ``md``, ``csv``, ``latex``, ``html`` (a standalone page) or ``json``; with ``breakdown``
    its groups are the value columns; ``refused``: the systems left out, said in the notes (JSON: ``refused``)."""
    formatter = FORMATTERS.get(fmt)
    if formatter is None:
        raise UsageError(f"unknown format '{fmt}'; valid: {', '.join(FORMATS)}")
    return formatter(rows, metric, breakdown, refused)
