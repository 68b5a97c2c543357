"""``r2med fuse``: fuse runs (RRF, CombSUM, CombMNZ, interpolation)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med.cli.args import csv_list as _csv


def cmd_fuse(args: argparse.Namespace) -> int:
    from r2med.errors import UsageError
    from r2med.fusion import fuse
    from r2med.io.dirs import dir_problem
    from r2med.store.result_set import read_stored_run
    from r2med.store.runs import write_trec_run

    if args.output.is_dir():
        raise UsageError(f"--output {args.output} is a directory; name the fused run file, "
                         f"e.g. --output {args.output / 'fused.run'}")
    problem = dir_problem(args.output.parent)
    if problem is not None:
        raise UsageError(f"--output {args.output}: {problem}; name a run file in a writable directory")
    runs = [read_stored_run(path, system=path.parent.name) for path in args.runs]
    options: dict[str, object] = {"depth": args.top_k}
    if args.method == "rrf":
        options.update(k=args.k, weights=args.weights)
    elif args.method == "interpolate":
        options.update(alpha=args.alpha, norm=args.norm)
    else:
        options.update(norm=args.norm, weights=args.weights)
    fused = fuse(runs, args.method, **options)
    write_trec_run(fused, args.output, tag=args.method)
    if not args.quiet:
        print(f"{args.method} of {len(runs)} runs ({len(fused)} queries) -> {args.output}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``fuse`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    fu = sub.add_parser("fuse", parents=[common], help="fuse runs: RRF, CombSUM, CombMNZ, weighted interpolation")
    fu.add_argument("runs", nargs="+", type=Path, help="TREC runs or top-k JSONL runs of the same queries")
    fu.add_argument("--method", default="rrf", choices=["rrf", "combsum", "combmnz", "interpolate"], help="default rrf")
    fu.add_argument("--k", type=float, default=60, help="RRF's k (default 60)")
    fu.add_argument("--weights", type=lambda t: [float(x) for x in _csv(t)], default=None, metavar="W1,W2,...",
                    help="one weight per run (rrf, combsum, combmnz)")
    fu.add_argument("--alpha", type=float, default=0.5, help="interpolate: alpha * first + (1 - alpha) * second")
    fu.add_argument("--norm", default="minmax", choices=["minmax", "zscore", "none"], help="score normalisation per query")
    fu.add_argument("--top-k", type=int, default=100, help="documents kept per query (default 100)")
    fu.add_argument("--output", "-o", type=Path, required=True, help="the fused TREC run to write")
    fu.set_defaults(func=cmd_fuse)
