"""``r2med fuse``: fuse runs (RRF, CombSUM, CombMNZ, interpolation)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from r2med.cli.args import positive_int


def flag_sets() -> list:
    """Every fusion method's options (``r2med.fusion.METHODS``), each flag once; a method takes its own."""
    from r2med.fusion import METHODS
    from r2med.options import Flags

    return [Flags(cls, title=f"{', '.join(m for m, f in METHODS.items() if f.options is cls)} options")
            for cls in dict.fromkeys(method.options for method in METHODS.values())]


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
    from r2med.cli.flags import given
    from r2med.fusion import METHODS
    from r2med.options import options_of

    values = given(args, flag_sets())
    own = {opt.name for opt in options_of(METHODS[args.method].options)}
    other = sorted(set(values) - own)
    if other:
        raise UsageError(f"--{other[0].replace('_', '-')} is not an option of --method {args.method} (its options: "
                         f"{', '.join('--' + name for name in sorted(own))})")
    runs = [read_stored_run(path, system=path.parent.name) for path in args.runs]
    fused = fuse(runs, args.method, depth=args.top_k, **values)
    write_trec_run(fused, args.output, tag=args.method)
    if not args.quiet:
        print(f"{args.method} of {len(runs)} runs ({len(fused)} queries) -> {args.output}", file=sys.stderr)
    return 0


def run_file(text: str) -> Path:
    """``--output``: a file; a name ending in ``/`` names a directory (even one that does not exist yet), which
    ``Path`` would silently turn into a file of that name.

    >>> run_file("out/fused.run")
    PosixPath('out/fused.run')
    >>> run_file("outdir/")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'outdir/' names a directory (it ends with '/'); name the fused run file, e.g. outdir/fused.run
    """
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} names a directory (it ends with '/'); name the fused run file, "
                                         f"e.g. {text.rstrip('/' + os.sep)}/fused.run")
    return Path(text)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``fuse`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    fu = sub.add_parser("fuse", parents=[common], help="fuse runs: RRF, CombSUM, CombMNZ, weighted interpolation")
    fu.add_argument("runs", nargs="+", type=Path, help="TREC runs or top-k JSONL runs of the same queries")
    from r2med.cli.flags import add
    from r2med.fusion import METHODS

    fu.add_argument("--method", default="rrf", choices=list(METHODS), help="default rrf")
    fu.add_argument("--top-k", type=positive_int, default=100, help="documents kept per query (default 100)")
    fu.add_argument("--output", "-o", type=run_file, required=True, help="the fused TREC run to write")
    add(fu, flag_sets())
    fu.set_defaults(func=cmd_fuse)
