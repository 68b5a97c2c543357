"""``r2med compare A B [--results DIR] [--tasks ...] [--format md|json] [--json] [--plot FILE]``: paired tests from per-query
metrics."""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import csv_list, hidden_alias, number, whole_number
from r2med.cli.leaderboard import add_command_parser, add_format_options, emit, output_format
from r2med.errors import UsageError


def cmd_compare(args: argparse.Namespace) -> int:
    from r2med.reporting.compare import compare_systems, format_comparison, resolve_system

    if args.n_resamples < 1:
        raise UsageError(f"--n-resamples must be at least 1, got {args.n_resamples}")
    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be between 0 and 1 (e.g. 0.95), got {args.confidence}")
    fmt = output_format(args)
    if args.plot is not None:
        from r2med.reporting.plots import check_plot_target

        check_plot_target(args.plot)
    a = resolve_system(args.a, results=args.results)
    b = resolve_system(args.b, results=args.results)
    published = [side.label for side in (a, b) if side.paper is not None]
    if args.plot is not None and published:
        raise UsageError(f"--plot draws per-query differences, and {' and '.join(published)} has only the paper's "
                         "aggregate numbers; compare two result folders to plot them (or leave out --plot)")
    cmp = compare_systems(a, b, datasets=args.tasks, metric=args.metric, n_resamples=args.n_resamples,
                          seed=args.seed, confidence=args.confidence)
    emit(format_comparison(cmp, fmt), args.output)
    if args.plot is not None:
        from r2med.reporting.plots import comparison_plot

        comparison_plot(cmp, args.plot)
    return 0


def register(subparsers, common_parent: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = add_command_parser(
        subparsers, common_parent, "compare",
        help="compare two systems per dataset with paired significance tests",
        description="A and B are result folders (results/base retriever/bm25), system paths under --results, or "
                    "paper:<published path>. Per dataset: mean difference A-B, paired randomization test, paired "
                    "t-test, paired bootstrap CI, wins/ties/losses; Holm correction across datasets; a pooled test "
                    "over all paired queries. Published numbers are aggregates: no test is possible against them.",
    )
    parser.add_argument("a", metavar="A", help="first system (differences are A - B)")
    parser.add_argument("b", metavar="B", help="second system")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="result directory that A and B are paths in (default ./results)")
    parser.add_argument("--tasks", dest="tasks", type=csv_list, default=None, metavar="NAMES",
                        help="comma-separated datasets, any collection ('r2med' = R2MED's eight; default: every "
                             "dataset either system has)")
    hidden_alias(parser, "--datasets", "--tasks")  # one name for the datasets in every command (issue 38)
    parser.add_argument("--metric", default="ndcg_at_10", help="official key (default ndcg_at_10)")
    parser.add_argument("--n-resamples", type=whole_number, default=10000, help="permutations and bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=whole_number, default=0, help="seed of the random generator (default 0)")
    parser.add_argument("--confidence", type=number, default=0.95, help="confidence level of the interval (default 0.95)")
    add_format_options(parser, ["md", "json"])
    parser.add_argument("-o", "--output", type=Path, default=None, help="write to this file instead of stdout")
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE",
                        help="also draw every paired query's A - B, sorted, to FILE (.png or .svg; the 'report' extra), "
                             "the pooled test's result in its title")
    parser.set_defaults(func=cmd_compare)
    return parser
