"""``r2med leaderboard [RESULT_DIRS...] [--with-paper] [--metric ndcg_at_10] [--format md|csv|latex|html|json]``."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_command_parser(subparsers, common_parent: argparse.ArgumentParser | None, name: str, **kwargs):
    """``subparsers.add_parser(name, parents=[common_parent], ...)``; an ``add_parser`` wrapped to add
    the common options itself is handled too, so the parents are not given twice."""
    if common_parent is None:
        return subparsers.add_parser(name, **kwargs)
    try:
        return subparsers.add_parser(name, parents=[common_parent], **kwargs)
    except TypeError:  # a wrapped add_parser that passes parents=[common] itself
        return subparsers.add_parser(name, **kwargs)


def emit(text: str, output: Path | None) -> None:
    """Print ``text`` or write it to ``output`` atomically."""
    if output is None:
        print(text)
        return
    from r2med.io.atomic import write_text_atomic

    write_text_atomic(output, text if text.endswith("\n") else text + "\n")


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from r2med.reporting.leaderboard import collect, format_leaderboard

    rows = collect(args.result_dirs, with_paper=args.with_paper, metric=args.metric)
    emit(format_leaderboard(rows, args.format, metric=args.metric), args.output)
    return 0


def register(subparsers, common_parent: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from r2med.reporting.leaderboard import FORMATS

    parser = add_command_parser(
        subparsers, common_parent, "leaderboard",
        help="systems x datasets table from result directories, next to the paper's numbers",
        description="Rows: systems found under RESULT_DIRS (r2med's output or the official results/ tree, read as "
                    "is) and, with --with-paper, the 71 published systems. Columns: the 8 datasets in the paper's "
                    "order and their average, x100 with 2 decimals; systems missing datasets show their coverage "
                    "and no average.",
    )
    parser.add_argument("result_dirs", nargs="*", type=Path, metavar="RESULT_DIR", help="result directories")
    parser.add_argument("--with-paper", action="store_true", help="add the published numbers (source 'paper')")
    parser.add_argument("--metric", default="ndcg_at_10", help="official key (ndcg_at_10, recall_at_100, mrr, ...)")
    parser.add_argument("--format", choices=FORMATS, default="md", help="output format (default md)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write to this file instead of stdout")
    parser.set_defaults(func=cmd_leaderboard)
    return parser
