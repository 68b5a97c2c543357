"""Plain Markdown tables (also readable in a terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal


def pct(value: float | None) -> str:
    """A 0-1 value as the leaderboard shows it: x100, 2 decimals, half up in decimal; '-' for none.

    Results hold 5-decimal values, so half up on their decimal form is exact where float formatting
    is not (0.26885 * 100 is 26.884999... in binary).

    >>> pct(0.15126), pct(0.26885), f"{100 * 0.26885:.2f}", pct(None)
    ('15.13', '26.89', '26.88', '-')
    """
    if value is None:
        return "-"
    return str((Decimal(repr(float(value))) * 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, align_right: Sequence[bool] | None = None) -> str:
    """A padded Markdown table.

    >>> print(markdown_table(["name", "n"], [["a", 1], ["bb", 22]], align_right=[False, True]))
    | name |  n |
    |------|---:|
    | a    |  1 |
    | bb   | 22 |
    """
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    right = list(align_right or [False] * len(headers))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right)) + "|"
    return "\n".join([line(headers), rule] + [line(r) for r in cells])
