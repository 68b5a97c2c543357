"""``r2med rerank``: rerank a first stage's top k with a cross-encoder, RankLLaMA or a listwise LLM.

Thin: parses, builds a ``PipelineSpec`` whose first stage is the stored runs of ``--run`` and whose last is
the reranker, calls ``run_pipeline`` and prints a summary. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, progress_printer, result_table
from r2med.cli.args import csv_list as _csv
from r2med.cli.args import positive_int as _positive
from r2med.cli.reranker_args import add_reranker_options, reranker_options


def cmd_rerank(args: argparse.Namespace) -> int:
    from r2med.config import PipelineSpec, RerankSpec
    from r2med.pipeline import run_pipeline
    from r2med.stages import summarise
    from r2med.store.results import SystemPath

    rerank = RerankSpec(args.reranker, top_k=args.top_k, truncate=args.truncate, identical_ids=args.identical_ids,
                        options=reranker_options(args, batch_size=args.batch_size))
    spec = PipelineSpec(first_stage=args.run, first_stage_system=args.system, reranker=rerank,
                        datasets=tuple(args.tasks) if args.tasks else None, data_dir=args.data_dir, output=args.output,
                        cache=not args.no_cache)
    stages = run_pipeline(spec, progress=not (args.quiet or args.json), resume=not args.force,
                          on_result=progress_printer(args))
    system, results = next(iter(stages.items()))
    table = summarise(results)
    if args.json:
        emit_json(table)
        return 0
    where = SystemPath.parse(system)
    print(result_table(f"{where.reranker} on {where.system}, top {args.top_k} -> {where.directory(args.output)}",
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
    rr.add_argument("--top-k", type=_positive, default=100, help="documents reranked per query (10 or 100 in the paper; default 100)")
    rr.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    rr.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rr.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rr.add_argument("--system", default=None, metavar="NAME",
                    help="name of the first stage in the results path (default: from --run)")
    rr.add_argument("--batch-size", type=_positive, default=None, help="pointwise: pairs per batch (default 32; 8 for RankLLaMA)")
    rr.add_argument("--device", default=None, help="pointwise: cpu, cuda, cuda:N or mps (default: the best available)")
    rr.add_argument("--identical-ids", choices=["drop", "keep"], default="keep",
                    help="drop documents whose id equals the query id before scoring (default keep, as the official reranker numbers)")
    add_recompute_options(rr, caches="reranker scores and LLM responses")
    rr.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    add_reranker_options(rr)
    rr.set_defaults(func=cmd_rerank)
    return rr
