"""``r2med leaderboard [RESULT_DIRS...] [--with-paper] [--tasks NAMES] [--by dataset|task|body-system]
[--data-dir DIR] [--metric ndcg_at_10] [--format md|csv|latex|html|json] [--json] [--plot FILE]``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from r2med.cli.args import csv_list, hidden_alias
from r2med.errors import UsageError


def add_command_parser(subparsers, common_parent: argparse.ArgumentParser | None, name: str, **kwargs):
    """``subparsers.add_parser(name, parents=[common_parent], ...)``; an ``add_parser`` wrapped to add
    the common options itself is handled too, so the parents are not given twice."""
    if common_parent is None:
        return subparsers.add_parser(name, **kwargs)
    try:
        return subparsers.add_parser(name, parents=[common_parent], **kwargs)
    except TypeError:  # a wrapped add_parser that passes parents=[common] itself
        return subparsers.add_parser(name, **kwargs)


def add_format_options(parser: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """``--format`` (``formats``, default md) and ``--json``, the same output as ``--format json``."""
    parser.add_argument("--format", choices=formats, default=None, help="output format (default md)")
    parser.add_argument("--json", action="store_true", help="print JSON: the same output as --format json")


def output_format(args: argparse.Namespace) -> str:
    """The format ``--format``/``--json`` ask for (md when neither); UsageError when they ask for two.

    >>> output_format(argparse.Namespace(format=None, json=True))
    'json'
    >>> output_format(argparse.Namespace(format="csv", json=True))
    Traceback (most recent call last):
    ...
    r2med.errors.UsageError: --json and --format csv ask for two formats; give one of them
    """
    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} ask for two formats; give one of them")
    return "json" if args.json else args.format or "md"


def emit(text: str, output: Path | None) -> None:
    """Print ``text`` or write it to ``output`` atomically."""
    if output is None:
        print(text)
        return
    from r2med.io.atomic import write_text_atomic

    write_text_atomic(output, text if text.endswith("\n") else text + "\n")


#: where ``r2med run`` writes by default, and where leaderboard, compare and report look when given no directory
DEFAULT_RESULTS = Path("results")


def default_result_dirs(given: Sequence[Path], with_paper: bool) -> list[Path]:
    """``given``, else ``./results`` (``r2med run``'s default ``--output``) when it exists or nothing else is asked
    for (then the error names it)."""
    if given:
        return list(given)
    if DEFAULT_RESULTS.is_dir() or not with_paper:
        return [DEFAULT_RESULTS]
    return []


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from r2med.reporting.breakdown import by_body_system, by_task
    from r2med.reporting.board import format_leaderboard
    from r2med.reporting.leaderboard import RefusedResultsError, gather_all, rows_of

    fmt = output_format(args)
    if args.plot is not None:
        from r2med.reporting.plots import check_plot_target

        check_plot_target(args.plot)
    systems, refused = gather_all(default_result_dirs(args.result_dirs, args.with_paper), with_paper=args.with_paper)
    rows = rows_of(systems, args.metric, args.datasets)
    breakdown = None
    if args.by == "task":
        breakdown = by_task(rows)
    elif args.by == "body-system":
        breakdown = by_body_system(rows, systems, metric=args.metric, data_dir=args.data_dir)
    emit(format_leaderboard(rows, fmt, metric=args.metric, breakdown=breakdown, refused=refused), args.output)
    if args.plot is not None:
        from r2med.reporting.columns import average_label
        from r2med.reporting.leaderboard import shown_datasets
        from r2med.reporting.plots import leaderboard_plot

        leaderboard_plot(rows, args.metric, average_label(shown_datasets(rows)), args.plot)
    if refused:  # the verified systems are shown; then the ones left out, and exit 5
        raise RefusedResultsError(refused, shown=sum(not r.published for r in rows) or len(rows), written=args.output)
    return 0


def register(subparsers, common_parent: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from r2med.reporting.breakdown import BY
    from r2med.reporting.board import FORMATS

    parser = add_command_parser(
        subparsers, common_parent, "leaderboard",
        help="systems x datasets table from result directories, next to the paper's numbers",
        description="Rows: systems found under RESULT_DIRS (r2med's output or the official results/ tree, read as "
                    "is) and, with --with-paper, the 71 published systems and the 22 rows of R2MED's public leaderboard "
                    "that have only an average (93), cut to the same datasets. Columns: the "
                    "datasets the results hold (any collection: R2MED's eight in the paper's order first, then the "
                    "others alphabetically) and their average over the datasets shown, x100 with 2 decimals; "
                    "systems missing datasets show their coverage and no average. --by task or body-system groups "
                    "the columns as the paper does.",
    )
    parser.add_argument("result_dirs", nargs="*", type=Path, metavar="RESULT_DIR",
                        help="result directories (default ./results, where 'r2med run' writes)")
    parser.add_argument("--with-paper", action="store_true", help="add the published numbers (source 'paper') and the public leaderboard (its averages in "
                             "column 'leaderboard'; its rows without per-dataset numbers as source 'leaderboard')")
    parser.add_argument("--tasks", dest="datasets", type=csv_list, default=None, metavar="NAMES",
                        help="comma-separated datasets to show; 'r2med' = R2MED's eight, 'all' = every dataset held "
                             "(default: every dataset the results hold)")
    hidden_alias(parser, "--datasets", "--tasks")  # one name for the datasets in every command (issue 38)
    parser.add_argument("--by", choices=BY, default="dataset",
                        help="value columns: one per dataset (default), per R2MED task (the mean of its datasets), "
                             "or per body system (per-query values of the queries with each; needs the query files)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="--by body-system: dataset directories whose query files carry 'body_system' "
                             "(default: the hub cache)")
    parser.add_argument("--metric", default="ndcg_at_10", help="official key (ndcg_at_10, recall_at_100, mrr, ...)")
    add_format_options(parser, FORMATS)
    parser.add_argument("-o", "--output", type=Path, default=None, help="write to this file instead of stdout")
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE",
                        help="also draw the table to FILE (.png or .svg; the 'report' extra): a bar panel per dataset "
                             "and the average, the paper's number beside each system it published")
    parser.set_defaults(func=cmd_leaderboard)
    return parser
