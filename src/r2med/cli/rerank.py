"""``r2med rerank``: rerank a first stage's top k with a cross-encoder, RankLLaMA or a listwise LLM.

Thin: parses, builds a ``PipelineSpec`` whose first stage is the stored runs of ``--run`` and whose last is
the reranker, plans it (``--dry-run`` prints the plan), executes it and prints a summary. Importing this module
imports nothing heavy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, progress_printer, result_table
from r2med.cli.args import csv_list as _csv
from r2med.cli.dryrun import add_dry_run
from r2med.cli.flags import add, given


def flag_sets() -> list:
    """The generated option flags of ``rerank``: the stage's (``--top-k``, ``--truncate``, ``--identical-ids``) and
    every reranker kind's (each kind takes its own)."""
    from r2med.cli.flags import reranker_flags
    from r2med.config import RerankStageOptions
    from r2med.options import Flags

    return [Flags(RerankStageOptions), *reranker_flags()]


def cmd_rerank(args: argparse.Namespace) -> int:
    from r2med.cli.dryrun import command_of, show_plan
    from r2med.config import PipelineSpec, RerankSpec
    from r2med.execution import execute
    from r2med.planning import plan
    from r2med.stages import summarise
    from r2med.store.results import SystemPath

    sets = flag_sets()
    stage = sets[0].build(args)
    # the options as given: the plan resolves them for the reranker's kind, so an unknown reranker is one problem
    # among the others it finds (a missing --run file too), not the end of the command
    rerank = RerankSpec(args.reranker, top_k=stage.top_k, truncate=stage.truncate, identical_ids=stage.identical_ids,
                        options=given(args, sets[1:]))
    spec = PipelineSpec(first_stage=args.run, first_stage_system=args.system, reranker=rerank,
                        datasets=tuple(args.tasks) if args.tasks else None, data_dir=args.data_dir, output=args.output,
                        cache=not args.no_cache)
    planned = plan(spec, resume=not args.force, command=command_of(args))
    if args.dry_run:
        return show_plan(planned, as_json=args.json, title="r2med rerank: the plan (nothing was loaded or contacted)")
    stages = execute(planned, progress=not (args.quiet or args.json), resume=not args.force,
                     on_result=progress_printer(args))
    system, results = next(iter(stages.items()))
    table = summarise(results)
    if args.json:
        emit_json(table)
        return 0
    where = SystemPath.parse(system)
    print(result_table(f"{where.reranker} on {where.system}, top {stage.top_k} -> {where.directory(args.output)}",
                       table, {"nDCG@10": "ndcg_at_10", "R@100": "recall_at_100"}))
    return 0


def register(subparsers: argparse._SubParsersAction, common_parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``rerank`` to ``subparsers`` (with ``common_parent``'s -q/-v) and return its parser."""
    rr = subparsers.add_parser(
        "rerank", parents=[common_parent],
        help="rerank a first stage's top k (bge-reranker-v2-m3, monobert, rankllama, listwise LLM, any cross-encoder)",
        description="Rerank each query's top k of a first-stage run, evaluate, and write "
                    "<output>/reranker/<reranker>/<system>/top_<k>/<Dataset>.json|.run|.per_query.jsonl. "
                    "Scores and LLM responses are cached under R2MED_HOME, so a rerun costs nothing.",
    )
    rr.add_argument("--run", required=True, metavar="RUN_OR_SYSTEM",
                    help="the first stage: a system name ('bm25', 'nv') or path ('gar/hyde/gpt4/nv') under --output, "
                         "a directory of <Dataset>.run / .jsonl files, or one run file (then one dataset in --tasks)")
    rr.add_argument("--reranker", required=True, metavar="NAME|PATH",
                    help="bge-reranker-v2-m3, monobert, rankllama, listwise (with --llm-model), "
                         "or a local cross-encoder directory / hub id")
    rr.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    rr.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rr.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rr.add_argument("--system", default=None, metavar="NAME",
                    help="name of the first stage in the results path (default: from --run)")
    add(rr, flag_sets())
    add_recompute_options(rr, caches="reranker scores and LLM responses")
    rr.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    add_dry_run(rr)
    rr.set_defaults(func=cmd_rerank)
    return rr
