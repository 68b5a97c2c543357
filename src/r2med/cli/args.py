"""Argument types and small helpers shared by the subcommands (and ``r2med.cli``)."""

from __future__ import annotations

import argparse


def csv_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``.

    >>> csv_list("Biology, PMC-Treat,,")
    ['Biology', 'PMC-Treat']
    """
    return [part.strip() for part in text.split(",") if part.strip()]


def positive_int(text: str) -> int:
    """A whole number >= 1, or an argparse error naming the value.

    >>> positive_int("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def pct(value: float) -> str:
    """A 0-1 result value as every table shows it (x100, 2 decimals, half up; see ``reporting.tables.pct``)."""
    from r2med.reporting.tables import pct as table_pct

    return table_pct(value)


def int_list(text: str) -> list[int]:
    """``"1,10"`` -> ``[1, 10]``.

    >>> int_list("1, 10,100")
    [1, 10, 100]
    """
    try:
        return [int(part) for part in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def emit_json(obj: object) -> None:
    """Print ``obj`` as indented JSON on stdout (what every ``--json`` prints)."""
    import json

    print(json.dumps(obj, indent=2, ensure_ascii=False))
