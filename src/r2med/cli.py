"""The ``r2med`` command line: a thin argparse front over the library.

Each subcommand parses, calls one library function and prints. Exit codes (DESIGN.md #9):
0 ok, 2 usage, 3 missing extra, 4 missing resource, 5 invalid input, 6 provider/runtime failure.
Importing this module imports no heavy dependency.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from r2med import __version__
from r2med.errors import R2MedError

logger = logging.getLogger("r2med")


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _emit_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- evaluate
def cmd_evaluate(args: argparse.Namespace) -> int:
    from r2med.evaluation import evaluate
    from r2med.evaluation.files import load_qrels
    from r2med.reporting.tables import markdown_table
    from r2med.store.runs import read_run

    qrels = load_qrels(args.qrels)
    run = read_run(args.run)
    scores = evaluate(
        qrels, run, metrics=args.metrics, cutoffs=args.cutoffs,
        judged_all=args.judged_all, ignore_identical_ids=args.ignore_identical_ids,
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
    print(f"{scores.n_queries} queries evaluated")
    print(markdown_table(["metric", "value"], [[k, f"{v:.5f}"] for k, v in scores.aggregate.items()], align_right=[False, True]))
    if args.per_query:
        keys = list(scores.aggregate)
        rows = [[qid] + [f"{values[k]:.5f}" for k in keys] for qid, values in scores.per_query.items()]
        print()
        print(markdown_table(["qid"] + keys, rows, align_right=[False] + [True] * len(keys)))
    return 0


# ---------------------------------------------------------------- datasets
def cmd_datasets_list(args: argparse.Namespace) -> int:
    from r2med.datasets.catalog import catalog
    from r2med.datasets.hub import is_cached
    from r2med.reporting.tables import markdown_table
    from r2med.settings import get_settings

    settings = get_settings()
    specs = [catalog().get(n) for n in catalog().names()]
    if args.json:
        _emit_json([{**spec.__dict__, "aliases": list(spec.aliases), "cached": is_cached(spec, settings)} for spec in specs])
        return 0
    rows = [
        [s.name, s.task, s.queries, s.documents, s.repo, s.revision[:12], "yes" if is_cached(s, settings) else "no"]
        for s in specs
    ]
    print(markdown_table(["dataset", "task", "#Q", "#D", "repo", "revision", "cached"], rows,
                         align_right=[False, False, True, True, False, False, False]))
    return 0


def cmd_datasets_download(args: argparse.Namespace) -> int:
    from r2med.datasets.catalog import resolve_names
    from r2med.datasets.hub import download
    from r2med.settings import get_settings

    settings = get_settings()
    done = {}
    for spec in resolve_names(args.names):
        done[spec.name] = str(download(spec, settings, force=args.force))
        if not args.json:
            print(f"{spec.name}: {done[spec.name]}")
    if args.json:
        _emit_json(done)
    return 0


def cmd_datasets_stats(args: argparse.Namespace) -> int:
    from r2med.datasets import load_datasets
    from r2med.datasets.stats import compute_stats, stats_markdown

    rows = [compute_stats(ds) for ds in load_datasets(args.names, data_dir=args.data_dir)]
    if args.json:
        _emit_json([r.as_dict() for r in rows])
    else:
        print(stats_markdown(rows))
    return 0


def cmd_datasets_validate(args: argparse.Namespace) -> int:
    from r2med.datasets import locate, scan_dir
    from r2med.datasets.catalog import get_spec
    from r2med.datasets.hub import download
    from r2med.settings import get_settings

    report = {}
    unusable = False
    for name, path in locate(args.names, data_dir=args.data_dir):
        folder = path if path is not None else download(get_spec(name), get_settings())
        dataset, problems = scan_dir(folder, name)
        unusable |= dataset is None
        report[name] = {
            "path": str(folder),
            "usable": dataset is not None,
            "errors": problems.errors,
            "warnings": problems.warnings,
        }
        if dataset is not None:
            report[name].update(documents=len(dataset.doc_ids), queries=len(dataset.queries), judged=len(dataset.judged_query_ids))
    if args.json:
        _emit_json(report)
    else:
        for name, entry in report.items():
            verdict = "OK" if entry["usable"] else "UNUSABLE"
            print(f"{name} ({entry['path']}): {verdict}, {len(entry['errors'])} errors, {len(entry['warnings'])} warnings")
            for line in entry["errors"]:
                print(f"  error: {line}")
            for line in entry["warnings"]:
                print(f"  warning: {line}")
    return 5 if unusable else 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="r2med", description="Run the R2MED benchmark end to end, exactly as published.")
    parser.add_argument("--version", action="version", version=f"r2med {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr, no progress bars")
    parser.add_argument("-v", "--verbose", action="store_true", help="more detail on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ev = sub.add_parser("evaluate", help="score a run against qrels with R2MED's conventions")
    ev.add_argument("--qrels", required=True, type=Path, help="a dataset directory or a qrels file (R2MED JSONL, BEIR TSV, TREC)")
    ev.add_argument("--run", required=True, type=Path, help="a TREC run or the official top-k JSONL")
    ev.add_argument("--metrics", type=_csv, default=None,
                    help="comma-separated official keys (ndcg_at_10, recall_at_100, mrr, ...) or families (ndcg, map, recall, precision); default all")
    ev.add_argument("--cutoffs", type=_ints, default=None, help="cutoffs for families (default 1,10,25,50,100)")
    ev.add_argument("--judged-all", action="store_true", help="judged queries missing from the run count as 0 (trec_eval -c)")
    ev.add_argument("--ignore-identical-ids", action="store_true",
                    help="drop documents whose id equals the query id (BEIR's rule, used by the official dense numbers)")
    ev.add_argument("--per-query", action="store_true", help="also print every query's values")
    ev.add_argument("--json", action="store_true", help='print {"ndcg_at_10": ..., ...} (unrounded)')
    ev.set_defaults(func=cmd_evaluate)

    ds = sub.add_parser("datasets", help="list, download, describe and check datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", metavar="ACTION")
    ls = ds_sub.add_parser("list", help="the 8 R2MED datasets, their pinned revisions and whether they are cached")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_datasets_list)
    dl = ds_sub.add_parser("download", help="download datasets at their pinned revisions into R2MED_HOME")
    dl.add_argument("names", nargs="*", help="dataset names or 'all' (default all)")
    dl.add_argument("--force", action="store_true", help="download again even when cached")
    dl.add_argument("--json", action="store_true")
    dl.set_defaults(func=cmd_datasets_download)
    for action, func, text in (
        ("stats", cmd_datasets_stats, "per-dataset statistics as in R2MED's README (#Q, #D, avg positives, lengths)"),
        ("validate", cmd_datasets_validate, "check every file and report every problem; exit 5 when unusable"),
    ):
        p = ds_sub.add_parser(action, help=text)
        p.add_argument("names", nargs="*", help="dataset names or 'all' (default: all, or every dataset under --data-dir)")
        p.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub cache)")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
    return parser


class _CliHandler(logging.StreamHandler):
    """The one handler the CLI puts on the ``r2med`` logger (replaced on every call)."""


def _configure_logging(level: int) -> None:
    for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
        logger.removeHandler(handler)
    handler = _CliHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("r2med: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(logging.ERROR if args.quiet else logging.INFO if args.verbose else logging.WARNING)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr if args.command is None else sys.stdout)
        return 2
    try:
        return int(args.func(args) or 0)
    except R2MedError as exc:
        print(f"r2med: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("r2med: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
