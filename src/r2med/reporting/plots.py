"""The plots: matplotlib figures (the ``report`` extra), inlined in the report as SVG text (escaped, with no date),
or written to a file by ``r2med leaderboard --plot`` and ``r2med compare --plot`` (``.png`` or ``.svg``).

Names (systems, datasets) are plain text: every figure is made and drawn with matplotlib's ``text.parse_math`` off,
so a name holding ``$`` is shown as written, never read as mathtext (where ``$$`` is an error). Output is
deterministic: no date in an SVG, fixed element ids, no timestamp in a PNG. Each bar of a leaderboard plot carries
an id ``bar:<source>:<column>:<system>`` (an SVG's ``<g id=...>``), so what a file shows can be checked.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pathlib import Path

from r2med.errors import MissingExtraError, MissingResourceError, UsageError
from r2med.reporting.leaderboard import PAPER, Row
from r2med.reporting.official import is_published, normalise_metric, normalise_metrics, published
from r2med.reporting.tables import pct

#: a plot file's suffix -> the format matplotlib writes
PLOT_FORMATS = {".png": "png", ".svg": "svg"}
#: colours: r2med's own results, the paper's numbers, a query A wins, loses, ties
OWN, PUBLISHED, WIN, LOSS, TIE = "#1f77b4", "#9e9e9e", "#2ca02c", "#d62728", "#9e9e9e"

F = TypeVar("F", bound=Callable[..., Any])


def plain_text(plot: F) -> F:
    """Make and draw ``plot``'s figure with mathtext off: every text on it (titles, tick labels, notes) as written."""
    @functools.wraps(plot)
    def plotted(*args: Any, **kwargs: Any) -> Any:
        try:
            import matplotlib
        except ImportError:
            raise MissingExtraError("matplotlib", "report", "the report's plots") from None
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return plot(*args, **kwargs)

    return plotted  # type: ignore[return-value]


def _figure(width: float, height: float, layout: str | None = "constrained"):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report", "the report's plots") from None
    return Figure(figsize=(width, height), layout=layout)


def _text_width(texts: Sequence[str], size: float) -> float:
    """The widest of ``texts`` at ``size`` points, in inches, as matplotlib lays text out.

    >>> 0.2 < _text_width(["base retriever/bm25"], 8) < 1.5 and _text_width([], 8) == 0
    True
    """
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, font = TextToPath(), FontProperties(size=size)
    return max((measure.get_text_width_height_descent(t, font, ismath=False)[0] for t in texts), default=0.0) / 72


def _place(fig, n_rows: int, n_cols: int, *, left: float, right: float, top: float, bottom: float, row_gap: float,
           col_gap: float) -> None:
    """Margins and the gaps between panels, in inches: what a constrained layout would find, fixed, so that the
    report's figures are drawn once (a constrained layout draws them twice more to measure them)."""
    width, height = fig.get_size_inches()
    axes_height = max((height - top - bottom - row_gap * (n_rows - 1)) / n_rows, 0.1)
    axes_width = max((width - left - right - col_gap * (n_cols - 1)) / n_cols, 0.1)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        hspace=row_gap / axes_height, wspace=col_gap / axes_width)


def figure_svg(fig, salt: str):
    """An inline ``<svg>`` element of a matplotlib figure (text kept as escaped text, no date), as
    ``markupsafe.Markup`` so that the page's autoescaping inserts it as markup."""
    import matplotlib
    from markupsafe import Markup

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})  # the constrained layout fits the figure
    text = buffer.getvalue()
    return Markup(text[text.index("<svg"):])  # matplotlib escapes every text it writes into the SVG


def _leaderboard_figure(rows: Sequence[Row], datasets: Sequence[str], average: str,
                        paper: Sequence[Row | None] | None = None, title_space: float = 0.0):
    """One horizontal bar panel per dataset and for the average (x100, titled ``average``); published rows grey.
    With ``paper`` (a published row or None per row), each system's published number is a grey bar beside its own."""
    labels = [f"{r.name} [paper]" if r.published else r.system for r in rows]
    columns = [*datasets, average]

    def values(row: Row | None) -> list[float | None]:
        return [None] * len(columns) if row is None else [*(row.values.get(c) for c in datasets), row.average]

    table = list(zip(*(values(r) for r in rows))) if rows else [()] * len(columns)
    beside = list(zip(*(values(r) for r in paper))) if paper else None
    every = [v for col in (table + (beside or [])) for v in col if v is not None]
    top = max([100 * v for v in every] + [1.0]) * 1.2
    n_cols = min(3, len(columns))
    n_rows = -(-len(columns) // n_cols)
    left = 1.05 * _text_width(labels, 8) + 0.3  # the system names, left of the first column only (the panels share y)
    fig = _figure(left + 4.8 * n_cols,
                  title_space + n_rows * ((1.3 + 0.36 * len(rows)) if beside else (0.9 + 0.24 * len(rows))), layout=None)
    axes = fig.subplots(n_rows, n_cols, sharey=True, sharex=True, squeeze=False).ravel()
    _place(fig, n_rows, n_cols, left=left, right=0.15, top=0.35 + title_space, bottom=0.35, row_gap=0.4, col_gap=0.2)
    positions = list(range(len(rows)))
    height, shift = (0.4, 0.2) if beside else (0.8, 0.0)
    colors = [PUBLISHED if r.published else OWN for r in rows]
    for i, (ax, column) in enumerate(zip(axes, columns)):
        drawn = [(table[i], [p - shift for p in positions], colors, "own")]
        if beside:
            drawn.append((beside[i], [p + shift for p in positions], [PUBLISHED] * len(rows), PAPER))
        for vals, ys, color, source in drawn:
            have = [(row, y, v, c) for row, y, v, c in zip(rows, ys, vals, color) if v is not None]
            bars = ax.barh([y for _, y, _, _ in have], [100 * v for _, _, v, _ in have], height=height,
                           color=[c for *_, c in have], hatch="//" if source == PAPER else None,
                           edgecolor="white" if source == PAPER else None, linewidth=0)
            for bar, (row, _, _, _) in zip(bars, have):
                bar.set_gid(f"bar:{PAPER if source == PAPER or row.published else 'own'}:{column}:{row.system}")
            for y, v in zip(ys, vals):
                if v is not None or source == "own":
                    ax.text((100 * v if v is not None else 0) + top / 100, y, pct(v) if v is not None else "n/a",
                            va="center", fontsize=7, color="#555555" if source == PAPER else "black")
        ax.set_title(column, fontsize=10)
        ax.set_yticks(positions, labels, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(columns):]:
        ax.set_visible(False)
    axes[0].set_xlim(0, top)
    axes[0].invert_yaxis()  # the axes share y: the best system on top in every panel
    return fig


@plain_text
def leaderboard_svg(rows: Sequence[Row], datasets: Sequence[str], average: str = "Avg"):
    """The report's leaderboard bars (:func:`_leaderboard_figure`) as inline SVG."""
    return figure_svg(_leaderboard_figure(rows, datasets, average), "leaderboard")


def paper_row(row: Row, metric: str) -> Row | None:
    """The paper's row for ``row``'s system on ``row``'s datasets, or None when the paper has no number for it.

    >>> from r2med.datasets.catalog import dataset_names
    >>> mine = Row("base retriever/bm25", "bm25", "results", {"Biology": 0.3}, datasets=tuple(dataset_names()))
    >>> paper = paper_row(mine, "ndcg_at_10")
    >>> paper.source, round(100 * paper.values["Biology"], 2), round(100 * paper.average, 2)
    ('paper', 19.19, 15.13)
    >>> paper_row(Row("base retriever/mine", "mine", "results", {"Biology": 0.3}), "ndcg_at_10") is None
    True
    """
    if row.published or not is_published(row.system):
        return None
    found, key = published(row.system), normalise_metric(metric)
    values = {ds: normalise_metrics(found.scores[ds])[key] for ds in row.datasets
              if ds in found.scores and key in normalise_metrics(found.scores[ds])}
    return Row(found.path, found.name, PAPER, values, datasets=row.datasets) if values else None


@plain_text
def leaderboard_plot(rows: Sequence[Row], metric: str, average: str, path: Path) -> Path:
    """``r2med leaderboard --plot``: the systems x the datasets shown (and the average), each of r2med's own systems
    with the paper's number beside it where the paper published one (grey, hatched); rows of the paper itself
    (``--with-paper``) are grey bars of their own. Written to ``path`` (.png or .svg)."""
    datasets = rows[0].datasets if rows else ()
    beside = [paper_row(r, metric) for r in rows]
    fig = _leaderboard_figure(rows, datasets, average, beside if any(beside) else None, title_space=0.3)
    shown = "" if not any(beside) else "; grey hatched: the paper's number for the same system"
    fig.suptitle(f"{normalise_metric(metric)} x100{shown}", fontsize=10)
    return save_plot(fig, path, "leaderboard")


def _win_loss_axes(ax, diffs: Sequence[float]) -> None:
    """One panel: the differences x100, sorted (largest first), as filled steps: wins green, losses red."""
    import numpy as np

    from matplotlib.ticker import MaxNLocator

    ordered = np.sort(np.asarray(diffs, dtype=float) * 100)[::-1]
    edges = np.arange(len(ordered) + 1)  # query i is the step from i to i + 1
    signs = ((np.where(ordered > 0, ordered, 0), WIN, "wins"), (np.where(ordered < 0, ordered, 0), LOSS, "losses"))
    for part, color, gid in signs:
        if part.any():
            ax.stairs(part, edges, baseline=0, fill=True, color=color, linewidth=0, gid=gid)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlim(0, max(len(ordered), 1))
    if not np.any(ordered):  # all ties: the zero line in the middle, not at the bottom edge
        ax.set_ylim(-1, 1)


def _win_loss_figure(tested):
    """The report's win/loss panels: one per tested dataset (:func:`_win_loss_axes`), titled with W/T/L and p."""
    cols = min(4, len(tested))
    rows_n = -(-len(tested) // cols)
    fig = _figure(4 * cols, 2.6 * rows_n, layout=None)
    axes = fig.subplots(rows_n, cols, squeeze=False).ravel()
    _place(fig, rows_n, cols, left=0.7, right=0.15, top=0.3, bottom=0.5, row_gap=0.85, col_gap=0.8)
    for ax, r in zip(axes, tested):
        _win_loss_axes(ax, [d for _, d in r.diffs])
        t = r.test
        ax.set_title(f"{r.dataset}: {t.wins}/{t.ties}/{t.losses}, p={t.permutation_p:.3g}", fontsize=9)
        ax.set_xlabel("queries (sorted)", fontsize=8)
        ax.set_ylabel("A - B (x100)", fontsize=8)
    for ax in axes[len(tested):]:
        ax.set_visible(False)
    return fig


@plain_text
def win_loss_svg(comparison):
    """Per tested dataset, each query's A - B (x100), sorted: wins green, losses red."""
    tested = [r for r in comparison.datasets if r.test is not None]
    return figure_svg(_win_loss_figure(tested), "winloss")


def significance_title(comparison) -> str:
    """The title of ``r2med compare --plot``: A - B over every paired query, its mean, interval and tests.

    >>> from types import SimpleNamespace as NS
    >>> t = NS(n=876, mean_diff=0.0123, ci_low=0.004, ci_high=0.021, confidence=0.95, permutation_p=0.0042,
    ...        t_p=0.0051, wins=400, ties=100, losses=376)
    >>> cmp = NS(a="bm25", b="nv", metric="ndcg_at_10", pooled=t, pooled_datasets=("Biology", "MedQA-Diag"))
    >>> print(significance_title(cmp))
    bm25 - nv, ndcg_at_10 x100 over 876 queries of 2 datasets: mean +1.23 (95% CI +0.40 to +2.10)
    significant at 0.05: permutation p = 0.0042, t-test p = 0.0051; A wins/ties/loses 400/100/376
    """
    t = comparison.pooled
    where = f"over {t.n} queries of {len(comparison.pooled_datasets)} dataset" + (
        "s" if len(comparison.pooled_datasets) != 1 else "")
    verdict = "significant at 0.05" if t.permutation_p < 0.05 else "not significant at 0.05"
    return (f"{comparison.a} - {comparison.b}, {comparison.metric} x100 {where}: mean {100 * t.mean_diff:+.2f} "
            f"({round(100 * t.confidence)}% CI {100 * t.ci_low:+.2f} to {100 * t.ci_high:+.2f})\n"
            f"{verdict}: permutation p = {t.permutation_p:.2g}, t-test p = {t.t_p:.2g}; "
            f"A wins/ties/loses {t.wins}/{t.ties}/{t.losses}")


@plain_text
def comparison_plot(comparison, path: Path) -> Path:
    """``r2med compare A B --plot``: every paired query's A - B (x100), sorted, wins green and losses red, over all
    the datasets tested (one panel) and per dataset (one panel each, when there are several); the title says the
    pooled test's result (:func:`significance_title`). MissingResourceError (exit 4) when no dataset has per-query
    values of both systems."""
    tested = [r for r in comparison.datasets if r.test is not None]
    if comparison.pooled is None or not tested:
        raise MissingResourceError(
            f"--plot {path}: {comparison.pooled_reason or 'no paired test'}; the plot shows per-query differences, so "
            "both systems need per-query values (<Dataset>.per_query.jsonl, written by 'r2med run')")
    panels = ([] if len(tested) == 1 else tested)
    cols = min(4, len(panels)) if panels else 1
    fig = _figure(max(8, 4 * cols), 3.2 + 2.6 * (-(-len(panels) // cols) if panels else 0))
    grid = fig.add_gridspec(1 + (-(-len(panels) // cols) if panels else 0), cols)
    overall = fig.add_subplot(grid[0, :])
    _win_loss_axes(overall, [d for r in tested for _, d in r.diffs])
    overall.set_xlabel(f"queries, sorted by A - B ({comparison.pooled.n})", fontsize=8)
    overall.set_ylabel("A - B (x100)", fontsize=8)
    overall.set_title(significance_title(comparison), fontsize=9)
    for i, r in enumerate(panels):
        ax = fig.add_subplot(grid[1 + i // cols, i % cols])
        _win_loss_axes(ax, [d for _, d in r.diffs])
        t = r.test
        holm = f", Holm {r.permutation_p_holm:.2g}" if r.permutation_p_holm is not None else ""
        ax.set_title(f"{r.dataset}: {t.wins}/{t.ties}/{t.losses}, p = {t.permutation_p:.2g}{holm}", fontsize=8)
    return save_plot(fig, path, "compare")


def check_plot_target(path: Path) -> str:
    """The format a plot file's suffix asks for; UsageError naming the file otherwise, MissingExtraError without
    matplotlib (both before any work)."""
    fmt = PLOT_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise UsageError(f"--plot {path}: the file must end in {' or '.join(PLOT_FORMATS)} (the format written)")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError("matplotlib", "report", "--plot") from None
    return fmt


def save_plot(fig, path: Path, salt: str) -> Path:
    """Write ``fig`` to ``path`` atomically, deterministically: an SVG with text as text, no date and ids from
    ``salt``; a PNG at 150 dpi without a timestamp."""
    import matplotlib

    from r2med.io.atomic import write_atomic

    fmt = check_plot_target(path)
    buffer = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buffer, format=fmt, metadata=metadata, dpi=150, bbox_inches="tight", facecolor="white")
    return write_atomic(Path(path), lambda handle: handle.write(buffer.getvalue()), binary=True)
