"""``r2med reproduce SYSTEM``: a published configuration, ours next to the paper's numbers."""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import add_recompute_options, progress_printer
from r2med.cli.args import csv_list as _csv
from r2med.cli.args import emit_json as _emit_json
from r2med.cli.args import pct as _pct
from r2med.errors import MissingResourceError, UsageError
from r2med.store.results import SystemPath


def cmd_reproduce(args: argparse.Namespace) -> int:
    from r2med.pipeline import run_pipeline
    from r2med.reporting.tables import markdown_table
    from r2med.reproduce import compare, load_reference, plan_for, published_reference

    plan = plan_for(args.system)
    system = str(plan.system)
    paper = (load_reference(args.reference, system, args.metric) if args.reference
             else published_reference(system, args.metric))
    spec = plan.spec(datasets=args.tasks, data_dir=args.data_dir, output=args.output, device=args.device,
                     batch_size=args.batch_size)
    stages = run_pipeline(spec, progress=not (args.quiet or args.json), resume=not args.force,
                          on_result=progress_printer(args, policy=spec.answer_policy))
    retriever = SystemPath.parse(next(iter(stages))).system
    results = list(stages.values())[-1]
    ours = {r.dataset: r.scores.rounded(5)[args.metric] for r in results if args.metric in r.scores.aggregate}
    if len(ours) < len(results):
        raise UsageError(f"--metric {args.metric!r} is not among the result metrics (e.g. ndcg_at_10, recall_at_100, mrr)")
    rows = compare(ours, paper, tolerance=args.tolerance)
    failed = [r.dataset for r in rows if r.ok is False]
    compared = [r for r in rows if r.ok is not None]
    if args.json:
        _emit_json({"system": system, "metric": args.metric, "tolerance": args.tolerance,
                    "ok": bool(compared) and not failed, "compared": len(compared),
                    "datasets": {r.dataset: {"ours": r.ours, "paper": r.paper, "difference": r.difference, "ok": r.ok}
                                 for r in rows}})
        if not compared:
            raise _nothing_compared(ours, args.metric)
        return 1 if failed else 0

    def cell(value):
        return "-" if value is None else _pct(value)

    table = [[r.dataset, cell(r.ours), cell(r.paper),
              "-" if r.difference is None else ("-" if r.difference < 0 else "+") + _pct(abs(r.difference)),
              {True: "ok", False: "DIFFERENT", None: "not compared"}[r.ok]] for r in rows]
    print(f"{system} ({retriever}{', answer policy ' + plan.answer_policy if plan.expansion else ''}): "
          f"{args.metric} x100, ours vs the paper, tolerance {args.tolerance * 100:.2f}")
    print(markdown_table(["dataset", "ours", "paper", "diff", "status"], table,
                         align_right=[False, True, True, True, False]))
    if not compared:  # nothing was checked: never a quiet pass
        raise _nothing_compared(ours, args.metric)
    if failed:
        print(f"{len(failed)} of {len(compared)} datasets differ by more than the tolerance: {', '.join(failed)}")
        return 1
    print(f"all {len(compared)} compared datasets match")
    return 0


def _nothing_compared(ours: dict[str, float], metric: str) -> MissingResourceError:
    """Exit 4: no dataset run has a reference value, so nothing was checked (never a quiet pass)."""
    return MissingResourceError(
        f"no dataset was compared: none of {', '.join(ours) or 'the datasets run'} has a reference {metric} "
        "(the paper's numbers cover the eight R2MED datasets, by their names); run R2MED datasets (--tasks, or a "
        'directory named like one) or pass --reference FILE with {"<Dataset>": {"' + metric + '": ...}}'
    )


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``reproduce`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    rp = sub.add_parser("reproduce", parents=[common], help="run a published system's configuration and compare with the paper's numbers")
    rp.add_argument("system", help="official path, e.g. 'base retriever/bm25' or 'gar/hyde/gpt4/nv'")
    rp.add_argument("--tasks", type=_csv, default=None, metavar="NAMES", help="dataset names or 'all' (default all 8)")
    rp.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rp.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rp.add_argument("--metric", default="ndcg_at_10", help="metric compared (default ndcg_at_10)")
    rp.add_argument("--tolerance", type=float, default=0.0001,
                    help="largest accepted |ours - paper| on the 0-1 scale (default 0.0001 = 0.01 points)")
    rp.add_argument("--reference", type=Path, default=None,
                    help='JSON of reference values {"<Dataset>": {"ndcg_at_10": ...}} instead of the paper\'s')
    rp.add_argument("--device", default=None, help="dense: cpu, cuda, cuda:N or mps")
    rp.add_argument("--batch-size", type=int, default=None, help="dense: encoding batch size")
    add_recompute_options(rp)
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_reproduce)
