"""The ``r2med`` command line: a thin argparse front over the library.

Each subcommand parses, calls one library function and prints. Exit codes (DESIGN.md #9):
0 ok, 2 usage, 3 missing extra, 4 missing resource, 5 invalid input, 6 provider/runtime failure.
Importing this module imports no heavy dependency.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from r2med import __version__
from r2med.commands.args import csv_list as _csv
from r2med.commands.args import pct as _pct
from r2med.errors import R2MedError, UsageError

logger = logging.getLogger("r2med")


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


# ---------------------------------------------------------------- run
def _pipeline_spec(args: argparse.Namespace):
    """The pipeline of ``--config FILE`` or of repeated ``--retriever`` flags with ``--fuse``."""
    from r2med.config import FusionSpec, PipelineSpec, RetrieverSpec, load_spec

    if args.config is not None:
        given = [flag for flag, value in (("--retriever", args.retriever), ("--expansion", args.expansion),
                                          ("--fuse", args.fuse), ("--tasks", args.tasks)) if value]
        if given:
            raise UsageError(f"--config describes the whole pipeline; drop {', '.join(given)} (or edit the file)")
        return load_spec(args.config)
    retrievers = tuple(
        RetrieverSpec(name=name, bm25_variant=args.bm25_variant, k1=args.k1, b=args.b, device=args.device,
                      batch_size=args.batch_size, query_instruction=args.query_instruction,
                      doc_instruction=args.doc_instruction, identical_ids=args.identical_ids)
        for name in args.retriever
    )
    return PipelineSpec(
        retrievers=retrievers, name=args.name, datasets=tuple(args.tasks) if args.tasks else None,
        data_dir=args.data_dir, output=args.output, top_k=args.top_k, expansion=args.expansion,
        answer_policy=args.answer_policy, fusion=FusionSpec(args.fuse or "rrf"),
    )


def cmd_run_pipeline(args: argparse.Namespace) -> int:
    from r2med.pipeline import run_pipeline, summarise
    from r2med.reporting.tables import markdown_table

    spec = _pipeline_spec(args)

    def progress(system: str, result) -> None:
        if not args.json and not args.quiet:
            how = "stored result reused" if result.reused else f"{result.seconds:.1f} s"
            print(f"{system}: {result.dataset}: nDCG@10 {_pct(result.scores.rounded()['ndcg_at_10'])} ({how})",
                  file=sys.stderr)

    stages = run_pipeline(spec, progress=not (args.quiet or args.json), resume=not args.force, on_result=progress)
    tables = {system: summarise(results) for system, results in stages.items()}
    if args.reranker and stages:
        from r2med.datasets import load_dataset, locate

        last = list(stages)[-1]
        targets = locate(list(spec.datasets) if spec.datasets else None, data_dir=spec.data_dir)
        loaders = [lambda name=name, path=path: load_dataset(name, path=path) for name, path in targets]
        args.output = spec.output
        table, folder = _rerank_stage(args, last, loaders)
        tables[str(folder.relative_to(spec.output)) if folder else f"reranked {last}"] = table
    if args.json:
        _emit_json(tables)
        return 0
    systems = list(tables)
    names = list(next(iter(tables.values()))) if tables else []
    rows = [[name, *(_pct(tables[s][name]["ndcg_at_10"]) for s in systems)] for name in names]
    print(f"nDCG@10 x100 -> {spec.output}")
    print(markdown_table(["dataset", *systems], rows, align_right=[False, *([True] * len(systems))]))
    return 0


def _rerank_stage(args: argparse.Namespace, stage, loaders) -> tuple[dict, Path | None]:
    """``run --reranker``: rerank the stage just written; the table shows the reranked numbers."""
    from r2med.commands.rerank import rerank_after_run
    from r2med.pipeline import summarise

    def progress(result) -> None:
        if not args.json and not args.quiet:
            how = "stored result reused" if result.reused else f"{result.seconds:.1f} s"
            print(f"{result.dataset}: reranked top {args.rerank_top_k}: nDCG@10 "
                  f"{_pct(result.scores.rounded()['ndcg_at_10'])} ({how}) -> {result.files.result}", file=sys.stderr)

    results = rerank_after_run(args, str(stage), loaders, on_result=progress)
    return summarise(results), (results[0].files.result.parent if results else None)


def cmd_run(args: argparse.Namespace) -> int:
    from r2med.datasets import load_dataset, locate
    from r2med.pipeline import run_retriever, summarise
    from r2med.reporting.tables import markdown_table
    from r2med.retrievers.registry import RetrieverOptions, make_retriever
    from r2med.settings import get_settings

    if args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    if args.config is not None or len(args.retriever or []) > 1 or args.fuse:
        if args.no_cache or args.bm25_composition:
            raise UsageError("--no-cache and --bm25-composition apply to single-retriever runs, not to pipelines")
        return cmd_run_pipeline(args)
    args.retriever = (args.retriever or ["bm25"])[0]
    settings = get_settings()
    options = RetrieverOptions(
        cache_dir=None if args.no_cache else settings.home,
        progress=not (args.quiet or args.json),
        bm25_variant=args.bm25_variant, k1=args.k1, b=args.b, device=args.device, batch_size=args.batch_size,
        query_instruction=args.query_instruction, doc_instruction=args.doc_instruction,
    )
    retriever = make_retriever(args.retriever, options)
    if args.identical_ids is not None:  # default: as the official numbers of the family (dense drop, BM25 keep)
        retriever.ignore_identical_ids = args.identical_ids == "drop"
    targets = locate(args.tasks, data_dir=args.data_dir, settings=settings)
    loaders = [lambda name=name, path=path: load_dataset(name, path=path, settings=settings) for name, path in targets]

    def progress(result) -> None:
        if not args.json and not args.quiet:
            how = "stored result reused" if result.reused else f"{result.seconds:.1f} s"
            print(f"{result.dataset}: nDCG@10 {_pct(result.scores.rounded()['ndcg_at_10'])} "
                  f"({result.scores.n_queries} queries, {how}) -> {result.files.result}", file=sys.stderr)

    from r2med.store.results import SystemPath

    if args.expansion:
        from r2med.expansion.published import parse_expansion_spec
        from r2med.pipeline import run_gar

        method, llm = parse_expansion_spec(args.expansion)

        def prepared(dataset, queries) -> None:
            counts = queries.summary()
            if not args.json and not args.quiet and (counts["fell_back"] or counts["truncated"] or counts["text_differs"]):
                print(f"{dataset.name}: {counts['fell_back']} of {counts['queries']} expansions unusable -> plain query "
                      f"({counts['truncated']} traces cut off, answer policy {args.answer_policy}); "
                      f"{counts['text_differs']} query texts differ from the dataset's", file=sys.stderr)

        results = run_gar(
            retriever, loaders, method=method, llm=llm, output=args.output, top_k=args.top_k,
            policy=args.answer_policy, composition=args.bm25_composition, settings=settings,
            resume=not args.force, on_prepared=prepared, on_result=progress,
        )
        where = SystemPath.gar(args.bm25_composition or method, llm, retriever.name)
    else:
        if args.bm25_composition:
            raise UsageError("--bm25-composition needs --expansion METHOD/LLM")
        results = run_retriever(retriever, loaders, output=args.output, top_k=args.top_k, resume=not args.force,
                                on_result=progress)
        where = None
    table = summarise(results)
    stage = where or SystemPath.base(retriever.name)
    shown = Path(args.output).joinpath(*stage.parts)
    if args.reranker:
        table, folder = _rerank_stage(args, stage, loaders)
        shown = folder or shown
    if args.json:
        _emit_json(table)
        return 0
    rows = [[name, _pct(row["ndcg_at_10"]), _pct(row["recall_at_100"])] for name, row in table.items()]
    print(f"{retriever.name}{' + ' + args.reranker + ' top ' + str(args.rerank_top_k) if args.reranker else ''} -> {shown}")
    print(markdown_table(["dataset", "nDCG@10", "R@100"], rows, align_right=[False, True, True]))
    return 0


# ---------------------------------------------------------------- reproduce
def cmd_reproduce(args: argparse.Namespace) -> int:
    from r2med.datasets import load_dataset, locate
    from r2med.pipeline import run_gar, run_retriever
    from r2med.reporting.tables import markdown_table
    from r2med.reproduce import compare, load_reference, plan_for, published_reference
    from r2med.retrievers.registry import RetrieverOptions, make_retriever
    from r2med.settings import get_settings

    plan = plan_for(args.system)
    system = str(plan.system)
    paper = (load_reference(args.reference, system, args.metric) if args.reference
             else published_reference(system, args.metric))
    settings = get_settings()
    retriever = make_retriever(plan.retriever, RetrieverOptions(cache_dir=settings.home, progress=not (args.quiet or args.json),
                                                                device=args.device, batch_size=args.batch_size))
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


# ---------------------------------------------------------------- fuse
def cmd_fuse(args: argparse.Namespace) -> int:
    from r2med.fusion import fuse
    from r2med.store.runs import read_run, write_trec_run

    runs = [read_run(path) for path in args.runs]
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


# ---------------------------------------------------------------- models
def _in_paper_order(names: list[str]) -> list[str]:
    from r2med.datasets.catalog import dataset_names

    order = dataset_names()
    return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def cmd_models_list(args: argparse.Namespace) -> int:
    from r2med.reporting.tables import markdown_table
    from r2med.retrievers.dense.zoo import get_model, model_names

    specs = [get_model(name) for name in model_names()]
    if args.json:
        _emit_json([
            {
                "name": s.name, "model": s.model, "document_model": s.document_model, "backend": s.backend,
                "pooling": s.pooling, "normalize": s.normalize, "max_length": [s.query_max_length, s.document_max_length],
                "params": s.params, "aliases": list(s.aliases),
                "instructions": {d: {"query": s.instruction("query", d), "document": s.instruction("document", d)}
                                 for d in _in_paper_order(s.datasets())},
            }
            for s in specs
        ])
        return 0
    rows = []
    for s in specs:
        model = s.model if not s.document_model or s.document_model == s.model else f"{s.model} / {s.document_model}"
        length = s.query_max_length if s.query_max_length == s.document_max_length else f"{s.query_max_length}/{s.document_max_length}"
        rows.append([s.name, model, s.params or "", s.backend, s.pooling or "", length or "", "yes" if s.normalize else "no"])
    print(markdown_table(["name", "model", "size", "backend", "pooling", "max len", "norm"], rows))
    if args.instructions:
        for s in specs:
            print(f"\n{s.name}:")
            table = [[d, repr(s.instruction("query", d)), repr(s.instruction("document", d))] for d in _in_paper_order(s.datasets())]
            print(markdown_table(["dataset", "query instruction", "document instruction"], table) if table else "  (no instructions)")
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


def cmd_datasets_expansions(args: argparse.Namespace) -> int:
    from r2med.datasets import locate
    from r2med.datasets.hub import cache_dir, is_cached
    from r2med.expansion.published import available_expansions
    from r2med.reporting.tables import markdown_table
    from r2med.settings import get_settings

    settings = get_settings()
    report: dict[str, dict] = {}
    for name, folder in locate(args.names or None, data_dir=args.data_dir, settings=settings):
        if folder is None:  # an R2MED dataset from the hub: its cache directory, if downloaded
            from r2med.datasets.catalog import get_spec

            spec = get_spec(name)
            folder = cache_dir(spec, settings) if is_cached(spec, settings) else None
        found, problem = available_expansions(name, folder, settings=settings, hub=not args.local)
        report[name] = {"expansions": [{"method": m, "llm": n, "where": w} for m, n, w in found], "hub": problem}
    if args.json:
        _emit_json(report)
        return 0
    rows = [[name, f"{e['method']}/{e['llm']}", e["where"]] for name, entry in report.items() for e in entry["expansions"]]
    print(markdown_table(["dataset", "expansion", "where"], rows) if rows else "no expansions found")
    for name, entry in report.items():
        if entry["hub"] and not args.quiet:
            print(f"{name}: hub not listed: {entry['hub']}", file=sys.stderr)
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
#: modules of r2med.commands registered as subcommands (their imports are light: work is imported lazily)
COMMAND_MODULES = ("expand", "rerank", "leaderboard", "compare", "report")


def build_parser() -> argparse.ArgumentParser:
    # -q/-v work before and after the subcommand; SUPPRESS keeps a subcommand from resetting them
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only errors on stderr, no progress bars")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="more detail on stderr")
    parser = argparse.ArgumentParser(prog="r2med", description="Run the R2MED benchmark end to end, exactly as published.", parents=[common])
    parser.add_argument("--version", action="version", version=f"r2med {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_parser = sub.add_parser

    def add_parser(*a, **k):  # every subcommand accepts -q/-v too
        return _add_parser(*a, parents=[common], **k)

    sub.add_parser = add_parser  # type: ignore[method-assign]

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

    rn = sub.add_parser("run", help="run a retriever on R2MED datasets, evaluate, write official result files")
    rn.add_argument("--retriever", action="append", default=None, metavar="NAME|PATH",
                    help="bm25, a dense model of the zoo (r2med models list), a local model directory or a hub id "
                         "(default bm25); repeat it to fuse several retrievers (see --fuse)")
    rn.add_argument("--config", type=Path, default=None, metavar="FILE",
                    help="run the pipeline a TOML file describes (datasets, expansion, retrievers, fusion)")
    rn.add_argument("--fuse", default=None, choices=["rrf", "combsum", "combmnz", "interpolate"],
                    help="fuse the runs of the --retriever flags (default rrf when several are given)")
    rn.add_argument("--name", default=None, help="the fused system's name (results under fusion/<name>/)")
    rn.add_argument("--bm25-variant", default="r2med", choices=["r2med", "lucene"],
                    help="r2med: the published numbers (gensim LuceneBM25Model, query-side weighting); lucene: Anserini's BM25")
    rn.add_argument("--k1", type=float, default=0.9, help="BM25 k1 (default 0.9)")
    rn.add_argument("--b", type=float, default=0.4, help="BM25 b (default 0.4)")
    rn.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    rn.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rn.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rn.add_argument("--top-k", type=int, default=100, help="documents kept per query (default 100)")
    rn.add_argument("--query-instruction", default=None, help="dense: instruction prepended to every query (overrides the zoo's)")
    rn.add_argument("--doc-instruction", default=None, help="dense: instruction prepended to every document (overrides the zoo's)")
    rn.add_argument("--batch-size", type=int, default=None, help="dense: encoding batch size (default: the model's)")
    rn.add_argument("--device", default=None, help="dense: cpu, cuda, cuda:N or mps (default: the best available)")
    rn.add_argument("--identical-ids", choices=["drop", "keep"], default=None,
                    help="drop documents whose id equals the query id before scoring (BEIR's ignore_identical_ids); "
                         "default as the official numbers: drop for dense, keep for BM25")
    rn.add_argument("--expansion", default=None, metavar="METHOD/LLM",
                    help="generation-augmented retrieval with these expansions, e.g. hyde/o3-mini or query2doc/gpt4: "
                         "the dataset directory's, then r2med expand's, then the authors' published ones from the hub")
    rn.add_argument("--answer-policy", choices=["fallback", "authors", "error"], default="fallback",
                    help="a reasoning output with no usable answer (trace cut off, empty): fallback = the plain query "
                         "(default), authors = the whole text as the official code did (to reproduce), error = stop")
    rn.add_argument("--bm25-composition", default=None, choices=["query2doc-spaced"],
                    help="BM25 with query2doc: the corrected query + ' ' + query + ' ' + expansion instead of the "
                         "official glued query*2 (stored under gar/query2doc-spaced/)")
    rn.add_argument("--reranker", default=None, metavar="NAME|PATH",
                    help="rerank each dataset's top --rerank-top-k afterwards (see r2med rerank); results under "
                         "reranker/<reranker>/<system>/top_<k>/")
    rn.add_argument("--rerank-top-k", type=int, default=100, help="documents reranked per query (default 100)")
    rn.add_argument("--rerank-batch-size", type=int, default=None, help="pointwise reranker: pairs per batch")
    from r2med.commands.rerank import add_reranker_options

    add_reranker_options(rn)
    rn.add_argument("--no-cache", action="store_true", help="neither reuse nor save indexes and embeddings under R2MED_HOME")
    rn.add_argument("--resume", dest="force", action="store_false", default=False,
                    help="reuse a stored result whose manifest shows the same configuration and data (default)")
    rn.add_argument("--force", dest="force", action="store_true", help="recompute every result even when a matching one is stored")
    rn.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    rn.set_defaults(func=cmd_run)

    rp = sub.add_parser("reproduce", help="run a published system's configuration and compare with the paper's numbers")
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

    fu = sub.add_parser("fuse", help="fuse runs: RRF, CombSUM, CombMNZ, weighted interpolation")
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

    md = sub.add_parser("models", help="the dense model zoo")
    md_sub = md.add_subparsers(dest="models_command", metavar="ACTION")
    ml = md_sub.add_parser("list", help="models with size, backend, pooling, max length; --instructions for every dataset's", parents=[common])
    ml.add_argument("--instructions", action="store_true", help="also print each model's query/document instruction per dataset")
    ml.add_argument("--json", action="store_true")
    ml.set_defaults(func=cmd_models_list)

    ds = sub.add_parser("datasets", help="list, download, describe and check datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", metavar="ACTION")
    _ds_add = ds_sub.add_parser
    ds_sub.add_parser = lambda *a, **k: _ds_add(*a, parents=[common], **k)  # type: ignore[method-assign]
    ls = ds_sub.add_parser("list", help="the 8 R2MED datasets, their pinned revisions and whether they are cached")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_datasets_list)
    dl = ds_sub.add_parser("download", help="download datasets at their pinned revisions into R2MED_HOME")
    dl.add_argument("names", nargs="*", help="dataset names or 'all' (default all)")
    dl.add_argument("--force", action="store_true", help="download again even when cached")
    dl.add_argument("--json", action="store_true")
    dl.set_defaults(func=cmd_datasets_download)
    ex = ds_sub.add_parser("expansions", help="the LLM expansion sets available per dataset (--expansion METHOD/LLM)")
    ex.add_argument("names", nargs="*", help="dataset names or 'all' (default: all, or every dataset under --data-dir)")
    ex.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them")
    ex.add_argument("--local", action="store_true", help="do not list the hub repos (what is on this machine only)")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=cmd_datasets_expansions)
    for action, func, text in (
        ("stats", cmd_datasets_stats, "per-dataset statistics as in R2MED's README (#Q, #D, avg positives, lengths)"),
        ("validate", cmd_datasets_validate, "check every file and report every problem; exit 5 when unusable"),
    ):
        p = ds_sub.add_parser(action, help=text)
        p.add_argument("names", nargs="*", help="dataset names or 'all' (default: all, or every dataset under --data-dir)")
        p.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub cache)")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    # subcommands living in r2med.commands.<name>: each module's register(subparsers, common) adds its
    # parser with parents=[common] itself, so hand it the plain add_parser
    sub.add_parser = _add_parser  # type: ignore[method-assign]
    for module in COMMAND_MODULES:
        importlib.import_module(f"r2med.commands.{module}").register(sub, common)
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
    # -q/-v are absent from the namespace unless given (see build_parser)
    args.quiet, args.verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    saved = (logger.level, logger.propagate)
    _configure_logging(logging.ERROR if args.quiet else logging.INFO if args.verbose else logging.WARNING)
    try:
        return _dispatch(parser, args)
    finally:  # called in-process (tests, notebooks): leave the r2med logger as it was
        for handler in [h for h in logger.handlers if isinstance(h, _CliHandler)]:
            logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
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
    except BrokenPipeError:  # output piped into head & co.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
