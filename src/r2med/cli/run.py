"""``r2med run``: a retriever (with expansions, a reranker) or a pipeline over datasets; results in the official layout.

Thin: builds a ``PipelineSpec`` from ``--config FILE`` or the flags, calls ``run_pipeline`` and prints the table
(one retriever: its nDCG@10 and R@100; a pipeline: every stage's nDCG@10 side by side).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, pct, progress_printer, result_table
from r2med.cli.args import csv_list as _csv
from r2med.cli.reranker_args import add_reranker_options, reranker_options
from r2med.errors import UsageError


def _is_pipeline(args: argparse.Namespace) -> bool:
    """A pipeline (every stage shown) rather than one retriever: a spec file, several retrievers or a fusion."""
    return args.config is not None or len(args.retriever or []) > 1 or bool(args.fuse)


def build_spec(args: argparse.Namespace):
    """The ``PipelineSpec`` of ``--config FILE`` or of the flags (retrievers, expansion, fusion, reranker)."""
    from r2med.config import FusionSpec, PipelineSpec, RerankSpec, load_spec
    from r2med.retrievers.registry import RetrieverSpec

    rerank = None
    if args.reranker:
        rerank = RerankSpec(args.reranker, top_k=args.rerank_top_k, truncate=args.truncate,
                            options=reranker_options(args, batch_size=args.rerank_batch_size))
    if args.config is not None:
        given = [flag for flag, value in (("--retriever", args.retriever), ("--expansion", args.expansion),
                                          ("--fuse", args.fuse), ("--tasks", args.tasks)) if value]
        if given:
            raise UsageError(f"--config describes the whole pipeline; drop {', '.join(given)} (or edit the file)")
        spec = load_spec(args.config)
        return dataclasses.replace(spec, reranker=rerank or spec.reranker, cache=not args.no_cache)
    shared = [f.name for f in dataclasses.fields(RetrieverSpec) if f.name not in ("name", "encoder")]
    retrievers = tuple(RetrieverSpec(name, **{key: getattr(args, key) for key in shared})
                       for name in args.retriever or ["bm25"])
    return PipelineSpec(
        retrievers=retrievers, name=args.name, datasets=tuple(args.tasks) if args.tasks else None,
        data_dir=args.data_dir, output=args.output, top_k=args.top_k, expansion=args.expansion,
        answer_policy=args.answer_policy, bm25_composition=args.bm25_composition,
        fusion=FusionSpec(args.fuse or "rrf") if _is_pipeline(args) else None, reranker=rerank,
        cache=not args.no_cache,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from r2med.pipeline import run_pipeline
    from r2med.reporting.tables import markdown_table
    from r2med.stages import summarise
    from r2med.store.results import SystemPath

    spec, pipeline = build_spec(args), _is_pipeline(args)
    stages = run_pipeline(spec, progress=not (args.quiet or args.json), resume=not args.force,
                          on_result=progress_printer(args, systems=pipeline, policy=spec.answer_policy))
    tables = {system: summarise(results) for system, results in stages.items()}
    if pipeline:
        if args.json:
            emit_json(tables)
            return 0
        names = list(next(iter(tables.values()))) if tables else []
        rows = [[name, *(pct(table[name]["ndcg_at_10"]) for table in tables.values())] for name in names]
        print(f"nDCG@10 x100 -> {spec.output}")
        print(markdown_table(["dataset", *tables], rows, align_right=[False, *([True] * len(tables))]))
        return 0
    last = list(tables)[-1]
    if args.json:
        emit_json(tables[last])
        return 0
    retriever = SystemPath.parse(next(iter(tables))).system
    title = f"{retriever}{' + ' + args.reranker + ' top ' + str(args.rerank_top_k) if args.reranker else ''}"
    table = result_table(f"{title} -> {SystemPath.parse(last).directory(spec.output)}", tables[last],
                         {"nDCG@10": "ndcg_at_10", "R@100": "recall_at_100"}, extra=paper_column(last, tables[last]))
    print(table)
    return 0


def paper_column(system: str, table: dict) -> tuple[str, list[str]] | None:
    """The published nDCG@10 beside ours: ("paper nDCG@10", one cell per row of ``table``), or None when
    ``system`` is not a published system or none of the datasets has a published value.

    The average row's cell is the mean of the published values of the datasets shown (the paper's average when
    all 8 are), and '-' when one of them has none.

    >>> paper_column("base retriever/bm25", {"Biology": {}, "average": {}})
    ('paper nDCG@10', ['19.19', '19.19'])
    >>> paper_column("base retriever/bm25", {"scifact": {}, "average": {}}) is None
    True
    """
    from r2med.reporting.leaderboard import exact_mean
    from r2med.reporting.official import is_published, published

    if not is_published(system):
        return None
    values = published(system).values("ndcg_at_10")
    shown = [name for name in table if name != "average"]
    if not any(name in values for name in shown):
        return None
    cells = [pct(values.get(name)) for name in shown]
    if "average" in table:
        complete = all(name in values for name in shown)
        cells.append(pct(exact_mean([values[name] for name in shown])) if complete else "-")
    return "paper nDCG@10", cells


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
    rn.add_argument("--name", default=None,
                    help="the system's name: a single retriever's results go under base retriever/<name>/ (default: "
                         "the retriever's name, e.g. a model directory's last part), a fusion's under fusion/<name>/")
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
    from r2med.expansion.methods import bm25_compositions

    variants = {name: c for name, c in bm25_compositions().items() if name != c.method}
    rn.add_argument("--bm25-composition", default=None, choices=list(variants),
                    help="a BM25 composition other than the official one, stored under gar/<composition>/: "
                         + "; ".join(f"{name} ({c.method}): {c.description}" for name, c in variants.items()))
    rn.add_argument("--reranker", default=None, metavar="NAME|PATH",
                    help="rerank each dataset's top --rerank-top-k afterwards (see r2med rerank); results under "
                         "reranker/<reranker>/<system>/top_<k>/")
    rn.add_argument("--rerank-top-k", type=int, default=100, help="documents reranked per query (default 100)")
    rn.add_argument("--rerank-batch-size", type=int, default=None, help="pointwise reranker: pairs per batch")
    add_reranker_options(rn)
    add_recompute_options(rn, caches="indexes, embeddings and reranker scores")
    rn.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    rn.set_defaults(func=cmd_run)
