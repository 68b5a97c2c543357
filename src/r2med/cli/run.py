"""``r2med run``: a retriever (with expansions, a reranker) or a pipeline over datasets; results in the official layout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med.cli.args import csv_list as _csv
from r2med.cli.args import emit_json as _emit_json
from r2med.cli.args import pct as _pct
from r2med.errors import UsageError


def _pipeline_spec(args: argparse.Namespace):
    """The pipeline of ``--config FILE`` or of repeated ``--retriever`` flags with ``--fuse``."""
    from r2med.config import FusionSpec, PipelineSpec, load_spec
    from r2med.retrievers.registry import RetrieverSpec

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
    from r2med.cli.rerank import rerank_after_run
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
    from r2med.retrievers.registry import RetrieverSpec, make_retriever
    from r2med.settings import get_settings

    if args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    if args.config is not None or len(args.retriever or []) > 1 or args.fuse:
        if args.no_cache or args.bm25_composition:
            raise UsageError("--no-cache and --bm25-composition apply to single-retriever runs, not to pipelines")
        return cmd_run_pipeline(args)
    args.retriever = (args.retriever or ["bm25"])[0]
    settings = get_settings()
    spec = RetrieverSpec(
        name=args.retriever,
        bm25_variant=args.bm25_variant, k1=args.k1, b=args.b, device=args.device, batch_size=args.batch_size,
        query_instruction=args.query_instruction, doc_instruction=args.doc_instruction, identical_ids=args.identical_ids,
    )
    retriever = make_retriever(spec, cache_dir=None if args.no_cache else settings.home,
                               progress=not (args.quiet or args.json))
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


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``run`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    rn = sub.add_parser("run", parents=[common], help="run a retriever on R2MED datasets, evaluate, write official result files")
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
    from r2med.cli.rerank import add_reranker_options

    add_reranker_options(rn)
    rn.add_argument("--no-cache", action="store_true", help="neither reuse nor save indexes and embeddings under R2MED_HOME")
    rn.add_argument("--resume", dest="force", action="store_false", default=False,
                    help="reuse a stored result whose manifest shows the same configuration and data (default)")
    rn.add_argument("--force", dest="force", action="store_true", help="recompute every result even when a matching one is stored")
    rn.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    rn.set_defaults(func=cmd_run)
