"""The report's plots: matplotlib figures (the ``report`` extra) inlined as SVG text, escaped, with no date.

Names (systems, datasets) are plain text: every figure is made and drawn with matplotlib's ``text.parse_math`` off,
so a name holding ``$`` is shown as written, never read as mathtext (where ``$$`` is an error).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from r2med.errors import MissingExtraError
from r2med.reporting.leaderboard import Row
from r2med.reporting.tables import pct

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


def _figure(width: float, height: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report", "the report's plots") from None
    return Figure(figsize=(width, height), layout="constrained")


def figure_svg(fig, salt: str):
    """An inline ``<svg>`` element of a matplotlib figure (text kept as escaped text, no date), as
    ``markupsafe.Markup`` so that the page's autoescaping inserts it as markup."""
    import matplotlib
    from markupsafe import Markup

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    return Markup(text[text.index("<svg"):])  # matplotlib escapes every text it writes into the SVG


@plain_text
def leaderboard_svg(rows: Sequence[Row], datasets: Sequence[str], average: str = "Avg"):
    """One horizontal bar panel per dataset and for the average (x100, titled ``average``); published rows grey."""
    labels = [f"{r.name} [paper]" if r.published else r.system for r in rows]
    table = [[r.values.get(column) for r in rows] for column in datasets] + [[r.average for r in rows]]
    columns = [*datasets, average]
    top = max([100 * v for values in table for v in values if v is not None] + [1.0]) * 1.2
    n_cols = min(3, len(columns))
    n_rows = -(-len(columns) // n_cols)
    fig = _figure(5 * n_cols, n_rows * (0.9 + 0.24 * len(rows)))
    axes = fig.subplots(n_rows, n_cols, sharey=True, sharex=True, squeeze=False).ravel()
    positions = list(range(len(rows)))
    colors = ["#9e9e9e" if r.published else "#1f77b4" for r in rows]
    for ax, column, values in zip(axes, columns, table):
        ax.barh(positions, [100 * v if v is not None else 0 for v in values], color=colors)
        for y, v in zip(positions, values):
            ax.text((100 * v if v is not None else 0) + top / 100, y, pct(v) if v is not None else "n/a",
                    va="center", fontsize=7)
        ax.set_title(column, fontsize=10)
        ax.set_yticks(positions, labels, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(columns):]:
        ax.set_visible(False)
    axes[0].set_xlim(0, top)
    axes[0].invert_yaxis()  # the axes share y: the best system on top in every panel
    return figure_svg(fig, "leaderboard")


@plain_text
def win_loss_svg(comparison):
    """Per tested dataset, each query's A - B (x100), sorted: wins green, losses red."""
    tested = [r for r in comparison.datasets if r.test is not None]
    cols = min(4, len(tested))
    rows_n = -(-len(tested) // cols)
    fig = _figure(4 * cols, 2.6 * rows_n)
    axes = fig.subplots(rows_n, cols, squeeze=False).ravel()
    for ax, r in zip(axes, tested):
        diffs = sorted((100 * d for _, d in r.diffs), reverse=True)
        colors = ["#2ca02c" if d > 0 else "#d62728" if d < 0 else "#9e9e9e" for d in diffs]
        ax.bar(range(len(diffs)), diffs, width=1.0, color=colors)
        ax.axhline(0, color="black", linewidth=0.6)
        t = r.test
        ax.set_title(f"{r.dataset}: {t.wins}/{t.ties}/{t.losses}, p={t.permutation_p:.3g}", fontsize=9)
        ax.set_xlabel("queries (sorted)", fontsize=8)
        ax.set_ylabel("A - B (x100)", fontsize=8)
    for ax in axes[len(tested):]:
        ax.set_visible(False)
    return figure_svg(fig, "winloss")
