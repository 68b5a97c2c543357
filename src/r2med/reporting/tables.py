"""Plain Markdown tables (also readable in a terminal) and the escaping rules of the text exports.

- CSV (:func:`csv_cell`): a cell that a spreadsheet would run as a formula (it begins with ``=``,
  ``+``, ``-``, ``@``, a tab or a carriage return: OWASP's list) gets a leading single quote, which
  spreadsheets show as text. A cell that is a plain decimal number (``-0.5``, ``+1.2e-3``) is a value,
  not a formula, and is left as it is, so signed differences stay numbers.
- Markdown (:func:`md_text`): names and paths written into Markdown have ``&``, ``<`` and ``>``
  escaped, so raw HTML in a system name shows as text instead of running in a rendered page;
  :func:`markdown_table` escapes ``|`` in every cell, so a name cannot add a column. Headers and legends
  that may hold a dataset's name (:func:`md_label`) have ``<`` and ``>`` escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: object) -> object:
    """``value`` safe for a spreadsheet: formula-looking text gets a leading ``'``; numbers are kept.

    >>> csv_cell("=HYPERLINK(A1)"), csv_cell("@SUM(A1)"), csv_cell("-0.5"), csv_cell("-x"), csv_cell(1.5)
    ("'=HYPERLINK(A1)", "'@SUM(A1)", '-0.5', "'-x", 1.5)
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def _quoted(value: object) -> str:
    text = repr(value) if isinstance(value, float) else str(value)
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_text(rows: Sequence[Sequence[object]]) -> str:
    """Rows as CSV, one ``\\n``-terminated line each: every cell through :func:`csv_cell`, quoted as RFC 4180
    says (a cell holding a comma, a quote, a newline or a carriage return is quoted; Python's csv module
    leaves a lone carriage return unquoted when the line ends in ``\\n``, which splits the row).

    >>> print(csv_text([["name", "value"], ["=1+2", -0.5], ['a "b", c', 3]]), end="")
    name,value
    '=1+2,-0.5
    "a ""b"", c",3
    """
    return "".join(",".join(_quoted(csv_cell(cell)) for cell in row) + "\n" for row in rows)


def md_text(value: object) -> str:
    """Text for Markdown: ``&``, ``<`` and ``>`` escaped, so HTML in a name is shown, not rendered.

    >>> md_text("<script>alert(1)</script> & co")
    '&lt;script&gt;alert(1)&lt;/script&gt; &amp; co'
    """
    return html.escape(str(value), quote=False)


def md_label(value: object) -> str:
    """A header or legend for Markdown: ``<`` and ``>`` escaped, so no HTML tag can form, and ``&`` kept, so a
    label such as ``Q&A reference retrieval`` reads as written (an entity renders as text, never as markup).

    >>> md_label("Q&A <b>x</b>")
    'Q&A &lt;b&gt;x&lt;/b&gt;'
    """
    return str(value).replace("<", "&lt;").replace(">", "&gt;")


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
    """A padded Markdown table; ``|`` inside a cell is escaped (``\\|``) so it cannot start a column.

    >>> print(markdown_table(["name", "n"], [["a", 1], ["bb", 22]], align_right=[False, True]))
    | name |  n |
    |------|---:|
    | a    |  1 |
    | bb   | 22 |
    """
    headers = [str(h).replace("|", "\\|") for h in headers]
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    right = list(align_right or [False] * len(headers))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right)) + "|"
    return "\n".join([line(headers), rule] + [line(r) for r in cells])
