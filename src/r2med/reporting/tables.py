"""Plain Markdown tables (also readable in a terminal)."""

from __future__ import annotations

from collections.abc import Sequence


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
