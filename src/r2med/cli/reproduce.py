"""``r2med reproduce SYSTEM``: a published configuration, ours next to the paper's numbers."""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import csv_list as _csv
from r2med.cli.args import emit_json as _emit_json
from r2med.cli.args import pct as _pct
from r2med.errors import UsageError


def cmd_reproduce(args: argparse.Namespace) -> int:
    from r2med.datasets import load_dataset, locate
    from r2med.pipeline import run_gar, run_retriever
    from r2med.reporting.tables import markdown_table
    from r2med.reproduce import compare, load_reference, plan_for, published_reference
    from r2med.retrievers.registry import RetrieverSpec, make_retriever
    from r2med.settings import get_settings

    plan = plan_for(args.system)
    system = str(plan.system)
    paper = (load_reference(args.reference, system, args.metric) if args.reference
             else published_reference(system, args.metric))
    settings = get_settings()
    retriever = make_retriever(RetrieverSpec(plan.retriever, device=args.device, batch_size=args.batch_size),
                               cache_dir=settings.home, progress=not (args.quiet or args.json))
    targets = locate(args.tasks, data_dir=args.data_dir, settings=settings)
    loaders = [lambda name=name, path=path: load_dataset(name, path=path, settings=settings) for name, path in targets]
    if plan.expansion is not None:
        results = run_gar(retriever, loaders, method=plan.expansion[0], llm=plan.expansion[1], output=args.output,
                          policy=plan.answer_policy, settings=settings, resume=not args.force)
    else:
        results = run_retriever(retriever, loaders, output=args.output, resume=not args.force)
    if plan.reranker is not None:
        from r2med.rerankers.registry import RerankerOptions, make_reranker
        from r2med.rerankers.stage import FirstStage, rerank_results

        reranker = make_reranker(plan.reranker, RerankerOptions(
            cache_dir=settings.home, progress=not (args.quiet or args.json), device=args.device, batch_size=args.batch_size))
        first = FirstStage.resolve(f"base retriever/{retriever.name}", output=args.output)
        results = rerank_results(reranker, loaders, first, output=args.output, top_k=plan.rerank_top_k, truncate=True,
                                 resume=not args.force)
    ours = {r.dataset: r.scores.rounded(5)[args.metric] for r in results if args.metric in r.scores.aggregate}
    if len(ours) < len(results):
        raise UsageError(f"--metric {args.metric!r} is not among the result metrics (e.g. ndcg_at_10, recall_at_100, mrr)")
    rows = compare(ours, paper, tolerance=args.tolerance)
    failed = [r.dataset for r in rows if r.ok is False]
    if args.json:
        _emit_json({"system": system, "metric": args.metric, "tolerance": args.tolerance, "ok": not failed,
                    "datasets": {r.dataset: {"ours": r.ours, "paper": r.paper, "difference": r.difference, "ok": r.ok}
                                 for r in rows}})
        return 1 if failed else 0

    def cell(value):
        return "-" if value is None else _pct(value)

    table = [[r.dataset, cell(r.ours), cell(r.paper),
              "-" if r.difference is None else ("-" if r.difference < 0 else "+") + _pct(abs(r.difference)),
              {True: "ok", False: "DIFFERENT", None: "not compared"}[r.ok]] for r in rows]
    print(f"{system} ({retriever.name}{', answer policy ' + plan.answer_policy if plan.expansion else ''}): "
          f"{args.metric} x100, ours vs the paper, tolerance {args.tolerance * 100:.2f}")
    print(markdown_table(["dataset", "ours", "paper", "diff", "status"], table,
                         align_right=[False, True, True, True, False]))
    compared = [r for r in rows if r.ok is not None]
    if failed:
        print(f"{len(failed)} of {len(compared)} datasets differ by more than the tolerance: {', '.join(failed)}")
        return 1
    print(f"all {len(compared)} compared datasets match")
    return 0


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
    rp.add_argument("--force", action="store_true", help="recompute even when a matching result is stored")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_reproduce)
