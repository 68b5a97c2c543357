"""``r2med evaluate``: score a run against qrels with R2MED's conventions."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from r2med.cli.args import csv_list as _csv
from r2med.cli.args import emit_json as _emit_json
from r2med.cli.args import int_list as _ints
from r2med.cli.args import pct

logger = logging.getLogger(__name__)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from r2med.evaluation import evaluate
    from r2med.evaluation.files import load_qrels
    from r2med.reporting.tables import markdown_table
    from r2med.store.result_set import read_result_file
    from r2med.store.runs import read_run

    qrels = load_qrels(args.qrels)
    run = read_result_file(args.run, read_run)
    scores = evaluate(
        qrels, run, metrics=args.metrics, cutoffs=args.cutoffs,
        judged_all=args.judged_all, ignore_identical_ids=args.identical_ids == "drop",
    )
    unjudged = sum(1 for qid in run if qid not in qrels)
    missing = sum(1 for qid in qrels if qid not in run)
    if unjudged:
        logger.warning("%d queries of the run have no judgements and are not scored", unjudged)
    if missing and not args.judged_all:
        logger.warning("%d judged queries are missing from the run and are not averaged (use --judged-all to count them as 0)", missing)
    if args.json:
        out: dict = dict(scores.aggregate)
        if args.per_query:
            out["per_query"] = scores.per_query
        _emit_json(out)
        return 0
    # one scale for people, as run and leaderboard print it (x100, 2 decimals); --json keeps the fractions
    print(f"{scores.n_queries} queries evaluated; values x100 (--json: fractions)")
    print(markdown_table(["metric", "value x100"], [[k, pct(v)] for k, v in scores.aggregate.items()],
                         align_right=[False, True]))
    if args.per_query:
        keys = list(scores.aggregate)
        rows = [[qid] + [pct(values[k]) for k in keys] for qid, values in scores.per_query.items()]
        print()
        print(markdown_table(["qid"] + keys, rows, align_right=[False] + [True] * len(keys)))
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``evaluate`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    ev = sub.add_parser("evaluate", parents=[common], help="score a run against qrels with R2MED's conventions")
    ev.add_argument("--qrels", required=True, type=Path, help="a dataset directory or a qrels file (R2MED JSONL, BEIR TSV, TREC)")
    ev.add_argument("--run", required=True, type=Path, help="a TREC run or the official top-k JSONL")
    ev.add_argument("--metrics", type=_csv, default=None,
                    help="comma-separated official keys (ndcg_at_10, recall_at_100, mrr, ...) or families (ndcg, map, recall, precision); default all")
    ev.add_argument("--cutoffs", type=_ints, default=None, help="cutoffs for families (default 1,10,25,50,100)")
    ev.add_argument("--judged-all", action="store_true", help="judged queries missing from the run count as 0 (trec_eval -c)")
    ev.add_argument("--identical-ids", choices=("drop", "keep"), default="keep",
                    help="drop: documents whose id equals the query id are dropped before scoring (BEIR's "
                         "ignore_identical_ids, as the official dense numbers); keep (default): scored as trec_eval does")
    # its name before issue 38 (run, rerank and the pipeline file say --identical-ids drop): still works, unlisted
    ev.add_argument("--ignore-identical-ids", dest="identical_ids", action="store_const", const="drop",
                    help=argparse.SUPPRESS)
    ev.add_argument("--per-query", action="store_true",
                    help="also print every query's values (x100, as the table; --json: fractions)")
    ev.add_argument("--json", action="store_true", help='print {"ndcg_at_10": ..., ...} (unrounded)')
    ev.set_defaults(func=cmd_evaluate)
