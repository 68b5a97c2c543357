"""``r2med report RESULT_DIR -o report.html [--json]``: one self-contained HTML page."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from r2med.cli.args import csv_list, emit_json, hidden_alias, whole_number
from r2med.cli.leaderboard import add_command_parser
from r2med.errors import UsageError

if TYPE_CHECKING:
    from r2med.reporting.report import ReportOptions


def cmd_report(args: argparse.Namespace) -> int:
    from r2med.reporting.leaderboard import RefusedResultsError
    from r2med.reporting.report import ReportOptions, write_report

    if args.inline_queries < 0:
        raise UsageError(f"--inline-queries must be 0 (every drill-down on pages of its own) or more, got "
                         f"{args.inline_queries}")
    for name in ("top", "max_doc_chars", "n_resamples"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.max_queries is not None and args.max_queries < 1:
        raise UsageError(f"--max-queries must be at least 1, got {args.max_queries}")
    options = ReportOptions(
        metric=args.metric, system_a=args.a, system_b=args.b, with_paper=args.with_paper, data_dir=args.data_dir,
        top=args.top, max_doc_chars=args.max_doc_chars, max_queries=args.max_queries,
        n_resamples=args.n_resamples, seed=args.seed, datasets=tuple(args.datasets) if args.datasets else None,
        inline_queries=args.inline_queries,
    )
    refused: RefusedResultsError | None = None
    with collected_warnings() if args.json else nullcontext([]) as warnings:
        try:
            path = write_report(args.result_dir, args.output, options)
        except RefusedResultsError as exc:  # the page shows the others: say where it is, then what was left out
            if exc.written is None:
                raise
            path, refused = exc.written, exc
    if args.json:
        emit_json(report_summary(path, args.result_dir, options, warnings))
    else:
        print(path)
    if refused is not None:
        raise refused
    return 0


def report_summary(path: Path, result_dir: Path, options: ReportOptions, warnings: list[str]) -> dict:
    """What ``--json`` prints: the page written and its drill-down pages (none when the page holds the drill-down),
    the systems of ``result_dir`` and the datasets it shows (the leaderboard's order), how many published systems it
    adds, the warnings said while writing it, and the systems left out (only when some are)."""
    from r2med.reporting.leaderboard import build_rows, paper_results, shown_datasets, survey
    from r2med.reporting.report import DRILL_PAGE, drill_folder

    found, refused = survey(Path(result_dir))
    rows = build_rows(found + (paper_results() if options.with_paper else []), options.metric, options.datasets)
    pages = sorted(drill_folder(path).glob(DRILL_PAGE.format(index="*", name="*")),
                   key=lambda p: int(p.name.split("-")[1]))
    return {"report": str(path), "drill_pages": [str(p) for p in pages], "result_dir": str(result_dir),
            "metric": options.metric,
            "systems": [r.system for r in rows if not r.published],
            "published_systems": sum(r.published for r in rows), "datasets": list(shown_datasets(rows)),
            "warnings": list(dict.fromkeys(warnings)),
            **({"refused": [{"system": r.system, "problems": list(r.problems)} for r in refused]} if refused else {})}


@contextmanager
def collected_warnings() -> Iterator[list[str]]:
    """The messages of the warnings r2med logs inside the block, -q or not (-q keeps them off stderr only)."""
    r2med_logger = logging.getLogger("r2med")
    messages: list[str] = []
    collector = logging.Handler(logging.WARNING)
    collector.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    level = r2med_logger.getEffectiveLevel()
    quieted = [(h, h.level) for h in r2med_logger.handlers] if level > logging.WARNING else []
    for handler, _ in quieted:  # -q: the terminal's handlers stay at the level -q set; the collector hears warnings
        handler.setLevel(max(handler.level, level))
    saved = r2med_logger.level
    r2med_logger.setLevel(min(level, logging.WARNING))
    r2med_logger.addHandler(collector)
    try:
        yield messages
    finally:
        r2med_logger.removeHandler(collector)
        r2med_logger.setLevel(saved)
        for handler, handler_level in quieted:
            handler.setLevel(handler_level)


def register(subparsers, common_parent: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from r2med.reporting import INLINE_QUERIES

    parser = add_command_parser(
        subparsers, common_parent, "report",
        help="write a self-contained HTML report (leaderboard, by task and body system, per-query wins/losses, drill-down)",
        description="One HTML file with no external resource: the leaderboard with bars per dataset (any collection), "
                    "the same rows by R2MED task and by body system (where the query files carry it), the per-query "
                    "comparison of two systems (A, B: default the two best with per-query files) and a per-query "
                    "drill-down (query, expansion, top documents with relevance marks and scores).",
    )
    parser.add_argument("result_dir", type=Path, nargs="?", default=Path("results"), metavar="RESULT_DIR",
                        help="result directory (written by 'r2med run'; default ./results)")
    parser.add_argument("-o", "--output", type=Path, default=Path("report.html"), help="HTML file (default report.html)")
    parser.add_argument("--a", default=None, metavar="SYSTEM", help="system path of A (e.g. 'base retriever/bm25')")
    parser.add_argument("--b", default=None, metavar="SYSTEM", help="system path of B")
    parser.add_argument("--metric", default="ndcg_at_10", help="official key (default ndcg_at_10)")
    parser.add_argument("--with-paper", action="store_true", help="add the published systems to the leaderboard")
    parser.add_argument("--tasks", dest="datasets", type=csv_list, default=None, metavar="NAMES",
                        help="comma-separated datasets to show; 'r2med' = R2MED's eight, 'all' = every dataset held "
                             "(default: every dataset the results hold)")
    hidden_alias(parser, "--datasets", "--tasks")  # one name for the datasets in every command (issue 38)
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="dataset directories for query/document texts and judgements (default: the directory each "
                             "result's manifest records, checked against its file hashes, else the hub cache)")
    parser.add_argument("--top", type=whole_number, default=10, help="documents shown per query (default 10)")
    parser.add_argument("--max-doc-chars", type=whole_number, default=400, help="characters of each document shown (default 400)")
    parser.add_argument("--max-queries", type=whole_number, default=None, help="queries shown per dataset (default all)")
    parser.add_argument("--inline-queries", type=whole_number, default=INLINE_QUERIES, metavar="N",
                        help=f"a drill-down of more queries than N goes to one page per dataset in <report>_files/, "
                             f"its index (values, links) staying in the report (default {INLINE_QUERIES}; 0: always)")
    parser.add_argument("--n-resamples", type=whole_number, default=10000, help="permutations and bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=whole_number, default=0, help="seed of the random generator (default 0)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON summary (the page written, systems, datasets, warnings) instead of its path")
    parser.set_defaults(func=cmd_report)
    return parser
