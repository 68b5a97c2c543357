"""``r2med run``: a retriever (with expansions, a reranker) or a pipeline over datasets; results in the official layout.

Thin: builds a ``PipelineSpec`` from ``--config FILE`` or the flags, plans it (``r2med.planning.plan``; ``--dry-run``
prints the plan), executes it and prints the table (one retriever: its nDCG@10 and R@100; a pipeline: every stage's nDCG@10 side by side).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, pct, progress_printer, result_table
from r2med.cli.args import csv_list as _csv
from r2med.cli.dryrun import add_dry_run
from r2med.cli.flags import add, given
from r2med.errors import UsageError


def flag_sets() -> list:
    """The generated option flags of ``run`` (``r2med.cli.flags``): the pipeline's, each retriever family's (defaults
    for every ``--retriever`` of that family; ``NAME:key=value`` sets them for one), the expansion's and the
    reranker's (``--rerank-top-k``, ``--rerank-batch-size``, ``--rerank-batch-tokens``)."""
    from r2med.cli.flags import reranker_flags, retriever_flags
    from r2med.config import ExpansionOptions, PipelineOptions, RerankStageOptions
    from r2med.options import Flags

    return [Flags(PipelineOptions), *retriever_flags(), Flags(ExpansionOptions, title="generation-augmented retrieval"),
            Flags(RerankStageOptions, rename={"top_k": "--rerank-top-k"}, skip=("identical_ids",), title="reranking"),
            *reranker_flags(rename={"batch_size": "--rerank-batch-size", "batch_tokens": "--rerank-batch-tokens"})]


def _is_pipeline(args: argparse.Namespace) -> bool:
    """A pipeline (every stage shown) rather than one retriever: a spec file, several retrievers or a fusion."""
    return args.config is not None or len(args.retriever or []) > 1 or bool(args.fuse)


def build_spec(args: argparse.Namespace):
    """The ``PipelineSpec`` of ``--config FILE`` or of the flags (retrievers, expansion, fusion, reranker)."""
    from r2med.config import ExpansionOptions, PipelineOptions, PipelineSpec, RerankSpec, load_spec
    from r2med.errors import Problems
    from r2med.options import Flags
    from r2med.rerankers.registry import option_classes
    from r2med.retrievers.registry import RetrieverSpec, check_known, retriever_option_classes

    sets = flag_sets()
    # each component reads its own flags: the dense --batch-size and the reranker's --rerank-batch-size are both
    # "batch_size", and a flag two components share (--device) reaches both
    values = given(args, [f for f in sets if f.cls in retriever_option_classes()])
    stage = next(f for f in sets if f.cls.__name__ == "RerankStageOptions").build(args)
    problems = Problems()  # every value the flags hold that cannot be read, reported together
    rerank = None
    if args.reranker:
        from r2med.rerankers.registry import options_for

        rerank = problems.check(lambda: RerankSpec(
            args.reranker, top_k=stage.top_k, truncate=stage.truncate,
            options=options_for(args.reranker, given(args, [f for f in sets if f.cls in option_classes()]))))
    if args.config is not None:
        named = {"--retriever": args.retriever, "--fuse": args.fuse, "--tasks": args.tasks,
                 **{f: True for f in _pipeline_flags(args, sets)}}
        extra = [flag for flag, value in named.items() if value]
        if extra:
            raise UsageError(f"--config describes the whole pipeline; drop {', '.join(extra)} (or edit the file)")
        problems.raise_any()
        spec = load_spec(args.config)
        # --data-dir and --output run the file's pipeline on other data or into another folder
        places = {key: value for key, value in (("data_dir", args.data_dir), ("output", args.output)) if value}
        return dataclasses.replace(spec, reranker=rerank or spec.reranker, cache=not args.no_cache, **places)
    pipeline = Flags(PipelineOptions).build(args)
    expansion = Flags(ExpansionOptions).build(args)
    retrievers = tuple(problems.check(lambda text=text: RetrieverSpec.parse(text, given=values,
                                                                            identical_ids=values.get("identical_ids")))
                       for text in args.retriever or ["bm25"])
    fusion = problems.check(lambda: _fusion(args.fuse)) if _is_pipeline(args) else None
    if problems.found:  # the plan checks the rest; a retriever misnamed beside a bad value is reported with it
        for spec in retrievers:
            if spec is not None:
                problems.check(lambda spec=spec: check_known(spec))
    problems.raise_any()
    return PipelineSpec(
        retrievers=retrievers, name=pipeline.name, datasets=tuple(args.tasks) if args.tasks else None,
        data_dir=args.data_dir, output=args.output or Path("results"), top_k=pipeline.top_k, expansion=expansion.spec,
        answer_policy=expansion.answer_policy, bm25_composition=expansion.bm25_composition,
        fusion=fusion, reranker=rerank, cache=not args.no_cache,
    )


def _pipeline_flags(args: argparse.Namespace, sets: list) -> list[str]:
    """The retriever, expansion and pipeline flags given (a ``--config`` file sets those itself)."""
    from r2med.config import ExpansionOptions, PipelineOptions
    from r2med.rerankers.registry import option_classes
    from r2med.retrievers.registry import retriever_option_classes

    owned = {PipelineOptions, ExpansionOptions, *retriever_option_classes()}
    # a flag a reranker shares with the retrievers (--device) is the reranker's when --reranker is given
    reranker_flags = ({flags.flag(opt) for flags in sets if flags.cls in option_classes() for opt in flags.options()}
                      if args.reranker else set())
    return list(dict.fromkeys(flags.flag(opt) for flags in sets if flags.cls in owned for opt in flags.options()
                              if hasattr(args, flags.dest(flags.flag(opt))) and flags.flag(opt) not in reranker_flags))


def _fusion(text: str | None):
    """``--fuse METHOD`` or ``--fuse METHOD:key=value,...`` (e.g. ``rrf:k=30``; default rrf)."""
    from r2med.config import FusionSpec
    from r2med.fusion import fusion_method
    from r2med.options import split_inline, values_from_text

    method, pairs = split_inline(text or "rrf", f"--fuse {text}")
    found = fusion_method(method)
    return FusionSpec(method, values_from_text([found.options], pairs, f"--fuse {text}"))


def cmd_run(args: argparse.Namespace) -> int:
    from r2med.cli.dryrun import command_of, show_plan
    from r2med.execution import execute
    from r2med.planning import plan
    from r2med.reporting.tables import markdown_table
    from r2med.stages import summarise
    from r2med.store.results import SystemPath

    spec, pipeline = build_spec(args), _is_pipeline(args)
    planned = plan(spec, resume=not args.force, command=command_of(args))
    if args.dry_run:
        return show_plan(planned, as_json=args.json, title="r2med run: the plan (nothing was loaded or contacted)")
    stages = execute(planned, progress=not (args.quiet or args.json), resume=not args.force,
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
    title = f"{retriever}{' + ' + args.reranker + ' top ' + str(spec.reranker.top_k) if spec.reranker else ''}"
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
    from r2med.datasets import dataset_names
    from r2med.types import exact_mean

    shown = [name for name in table if name != "average"]
    if not set(shown) & set(dataset_names()):  # only R2MED's datasets have published values: no need to read them
        return None
    from r2med.reporting.official import is_published, published

    if not is_published(system):
        return None
    values = published(system).values("ndcg_at_10")
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
    rn.add_argument("--retriever", action="append", default=None, metavar="NAME[:key=value,...]",
                    help="bm25 (bm25-lucene), a dense model of the zoo (r2med models list), a local model directory or "
                         "a hub id (default bm25), with its own options after a colon, e.g. bm25:variant=lucene,k1=1.2; "
                         "repeat it to fuse several retrievers (see --fuse)")
    rn.add_argument("--config", type=Path, default=None, metavar="FILE",
                    help="run the pipeline a TOML file describes (datasets, expansion, retrievers, fusion)")
    rn.add_argument("--fuse", default=None, metavar="METHOD[:key=value,...]",
                    help="fuse the runs of the --retriever flags: rrf, combsum, combmnz or interpolate, with that "
                         "method's options, e.g. rrf:k=30 (default rrf when several are given; docs/options.md)")
    rn.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    rn.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub, or the --config file's data_dir)")
    rn.add_argument("--output", type=Path, default=None,
                    help="results directory (default ./results, or the --config file's output)")
    rn.add_argument("--reranker", default=None, metavar="NAME|PATH",
                    help="rerank each dataset's top --rerank-top-k afterwards (see r2med rerank); results under "
                         "reranker/<reranker>/<system>/top_<k>/")
    add(rn, flag_sets())
    add_recompute_options(rn, caches="indexes, embeddings and reranker scores")
    rn.add_argument("--json", action="store_true", help='print {"<Dataset>": {...}, ..., "average": {...}}')
    add_dry_run(rn)
    rn.set_defaults(func=cmd_run)
