"""Argument types and small helpers shared by the subcommands (and ``r2med.cli``)."""

from __future__ import annotations

import argparse

from r2med.options import read_number


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
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def number_type(kind: type, word: str):
    """An argparse type reading ``word`` ("a port number") with :func:`r2med.options.read_number`."""

    def convert(text: str):
        try:
            return read_number(text, kind)
        except ValueError as exc:  # r2med.numbers.NumberError: its hint says what is wrong and what to write
            why = f" ({exc.hint})" if getattr(exc, "hint", "") else ""
            raise argparse.ArgumentTypeError(f"expected {word}, got {text!r}{why}") from None

    convert.__name__ = word  # argparse names the type in its "invalid ... value" message
    return convert


#: argparse types for numbers typed on the command line, in the grammar of files (``r2med.options.read_number``):
#: ``--seed 1_0`` or full-width digits are an error, not 10
whole_number = number_type(int, "a whole number")
number = number_type(float, "a number")


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
        return [read_number(part, int) for part in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def emit_json(obj: object) -> None:
    """Print ``obj`` as indented JSON on stdout (what every ``--json`` prints)."""
    import json

    print(json.dumps(obj, indent=2, ensure_ascii=False))


def hidden_alias(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Let ``old`` (an earlier spelling) still work as ``new``, unlisted: ``--help``, the usage line and the "did you
    mean" suggestions show only ``new``, the one name every command uses for the thing.

    >>> parser = argparse.ArgumentParser(prog="x")
    >>> _ = parser.add_argument("--output")
    >>> hidden_alias(parser, "--out", "--output")
    >>> parser.parse_args(["--out", "d"]).output, "--out " in parser.format_help()
    ('d', False)
    """
    parser._option_string_actions[old] = parser._option_string_actions[new]


def add_recompute_options(parser: argparse.ArgumentParser, *, caches: str | None = None) -> None:
    """``--force`` (recompute stored results; ``--resume``, the default, reuses matching ones) and, where the
    command has caches, ``--no-cache`` (``caches`` says which) — the same words in every subcommand."""
    parser.add_argument("--resume", dest="force", action="store_false", default=False,
                        help="reuse a stored result whose manifest shows the same configuration and data (default)")
    parser.add_argument("--force", dest="force", action="store_true",
                        help="recompute every result even when a matching one is stored")
    if caches is not None:
        parser.add_argument("--no-cache", action="store_true", help=f"neither reuse nor save {caches} under R2MED_HOME")


def progress_printer(args: argparse.Namespace, *, systems: bool = False, policy: str = "fallback"):
    """The one per-dataset progress line of every stage-running command, on stderr; silent with -q or --json.

    ``systems`` starts each line with the stage's system path (pipelines). A GAR stage whose expansions
    were not all usable says so first.
    """
    import sys

    from r2med.rerankers.base import cost_line

    def show(system: str, result) -> None:
        if args.json or args.quiet:
            return
        counts = result.details.get("expansion") or {}
        prefix = f"{system}: " if systems else ""
        if counts.get("fell_back") or counts.get("truncated") or counts.get("text_differs"):
            print(f"{prefix}{result.dataset}: {counts['fell_back']} of {counts['queries']} expansions unusable -> "
                  f"plain query ({counts['truncated']} traces cut off, answer policy {policy}); "
                  f"{counts['text_differs']} query texts differ from the dataset's", file=sys.stderr)
        how = "stored result reused" if result.reused else f"{result.seconds:.1f} s"
        print(f"{prefix}{result.dataset}: nDCG@10 {pct(result.scores.rounded()['ndcg_at_10'])} "
              f"({result.scores.n_queries} queries, {how}) -> {result.files.result}", file=sys.stderr)
        cost = cost_line(result.details.get("reranker_stats"))
        if cost is not None:  # an LLM reranker: what its windows cost
            print(f"{prefix}{result.dataset}: {cost}", file=sys.stderr)

    return show


def result_table(title: str, table: dict, columns: dict[str, str],
                 extra: tuple[str, list[str]] | None = None) -> str:
    """``title`` over a Markdown table of ``summarise`` output: one row per dataset, ``columns`` {header: key};
    ``extra`` (header, one cell per row) adds a last column, e.g. the published values."""
    from r2med.reporting.tables import markdown_table

    headers = ["dataset", *columns, *([extra[0]] if extra else [])]
    rows = [[name, *(pct(row[key]) for key in columns.values()), *([extra[1][i]] if extra else [])]
            for i, (name, row) in enumerate(table.items())]
    return f"{title}\n" + markdown_table(headers, rows, align_right=[False, *([True] * (len(headers) - 1))])
