"""``r2med agent``: Search-R1 or Search-o1 over any r2med retriever, on R2MED datasets or any collection.

Thin: builds a ``PipelineSpec`` whose first stage is the agent (``AgentSpec``), plans it (``--dry-run`` prints the
plan), executes it and prints the agent's own ranking per dataset and where its expansion file and trajectories are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, positive_int, progress_printer, result_table
from r2med.cli.args import csv_list as _csv
from r2med.cli.dryrun import add_dry_run
from r2med.cli.flags import add


def flag_sets() -> list:
    """The generated option flags of ``agent``: the agent's (``AgentConfig``: the LLM endpoint, the style, the loop's
    limits) and the dense search retriever's (``--search-with``'s defaults)."""
    from r2med.agent.config import AgentConfig
    from r2med.options import Flags
    from r2med.retrievers.dense.options import DenseOptions

    return [Flags(AgentConfig, required=("llm_model", "base_url"), title="agent"),
            Flags(DenseOptions, skip=("query_instruction", "doc_instruction"), title="dense search")]


def build_spec(args: argparse.Namespace):
    from r2med.agent.remote import is_server_url
    from r2med.config import AgentSpec, PipelineSpec
    from r2med.errors import Problems
    from r2med.retrievers.registry import RetrieverSpec, check_known

    agent, dense = flag_sets()
    problems = Problems()  # the agent's flags and --search-with, reported together; the plan checks the rest
    config = problems.check(lambda: agent.build(args))
    if is_server_url(args.search_with):  # a Search-R1-compatible retrieval server
        search = args.search_with
    else:
        search = problems.check(lambda: RetrieverSpec.parse(args.search_with, given=dense.given(args),
                                                            where=f"--search-with {args.search_with}"))
        if problems.found and search is not None:  # a misnamed searcher beside a bad flag is reported with it
            problems.check(lambda: check_known(search))
    problems.raise_any()
    return PipelineSpec(agent=AgentSpec(config, search, args.knowledge_dir),
                        datasets=tuple(args.tasks) if args.tasks else None, data_dir=args.data_dir,
                        output=args.output, top_k=args.top_k, cache=not args.no_cache)


def cmd_agent(args: argparse.Namespace) -> int:
    from r2med.cli.dryrun import command_of, show_plan
    from r2med.execution import execute
    from r2med.planning import plan
    from r2med.settings import get_settings
    from r2med.stages import summarise
    from r2med.store.results import SystemPath

    spec = build_spec(args)
    planned = plan(spec, resume=not args.force, command=command_of(args))
    if args.dry_run:
        return show_plan(planned, as_json=args.json, title="r2med agent: the plan (nothing was loaded or contacted)")
    stages = execute(planned, progress=not (args.quiet or args.json), resume=not args.force,
                     on_result=progress_printer(args))
    if len(stages) > 1:  # --seeds/--runs: one stored run per seed, then their mean and sd
        return _seeded(args, spec, stages)
    where, results = next(iter(stages.items()))
    table = summarise(results)
    if args.json:
        emit_json({"system": where, "scores": table,
                   "agent": {r.dataset: r.details.get("agent") for r in results if r.details}})
        return 0
    print(result_table(f"{where} (the agent's own ranking) -> {SystemPath.parse(where).directory(spec.output)}",
                       table, {"nDCG@10": "ndcg_at_10", "R@100": "recall_at_100"}))
    for result in results:
        agent = result.details.get("agent")
        if agent:
            reasons = ", ".join(f"{k} {v}" for k, v in agent["stop_reasons"].items())
            print(f"{result.dataset}: protocol {agent.get('protocol')}, {agent['searches']} searches, {agent['llm_calls']} LLM calls "
                  f"({agent['cached_calls']} from the cache); stop reasons: {reasons}", file=sys.stderr)
    if not args.quiet:
        from r2med.store.expansions import EXPANSION_FILE, agent_folder_name, expansion_dir

        path = SystemPath.parse(where)
        settings = get_settings()
        folder = agent_folder_name(str(path.llm), path.system)  # <llm>, or <llm>@<searcher>
        for result in results:
            found = expansion_dir(settings, result.dataset, str(path.method), folder) / EXPANSION_FILE
            if found.is_file():
                print(f"{result.dataset}: expansions {found} (r2med run --expansion {path.method}/{folder})",
                      file=sys.stderr)
            else:  # a stored result reused under another R2MED_HOME
                print(f"{result.dataset}: no expansion file at {found} (the stored ranking was reused; --force "
                      "reruns the agent and writes it)", file=sys.stderr)
    return 0


def _seeded(args: argparse.Namespace, spec, stages: dict) -> int:
    """Each seed's stored run (its system path and scores) and, per dataset, mean ± sample sd over the seeds."""
    from r2med.agent.outputs import seed_spread
    from r2med.cli.args import pct
    from r2med.reporting.tables import markdown_table
    from r2med.stages import summarise

    seeds = [config.seed for config in spec.agent.config.seeded()]
    tables = {seed: summarise(results) for seed, results in zip(seeds, stages.values())}
    spread = seed_spread(tables)
    if args.json:
        emit_json({"runs": [{"seed": seed, "system": where, "scores": tables[seed]}
                            for seed, where in zip(seeds, stages)], "mean_sd": spread})
        return 0
    for seed, where in zip(seeds, stages):
        print(f"seed {seed}: {where}", file=sys.stderr)

    def cell(value: dict) -> str:
        return pct(value["mean"]) + (f" ± {pct(value['sd'])}" if value["sd"] is not None else "")

    rows = [[name, cell(row["ndcg_at_10"]), cell(row["recall_at_100"])] for name, row in spread.items()]
    print(f"mean ± sd (sample, n - 1) over {len(seeds)} seeded runs ({','.join(map(str, seeds))}) of the agent's "
          "own ranking\n" + markdown_table(["dataset", "nDCG@10", "R@100"], rows, align_right=[False, True, True]))
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``agent`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    ag = sub.add_parser("agent", parents=[common],
                        help="agentic search (Search-R1, Search-o1) over any retriever: expansions, a ranking, trajectories")
    ag.add_argument("--search-with", default="bm25", metavar="RETRIEVER",
                    help="the retriever the agent searches with: bm25, a zoo model, a model path, openai:<model>, with "
                         "its own options after a colon (bm25:variant=lucene; default bm25), or a Search-R1-compatible "
                         "retrieval server, http://HOST:PORT/retrieve (r2med serve, Search-R1's retrieval_server.py)")
    ag.add_argument("--knowledge-dir", type=Path, default=None, metavar="DIR",
                    help="search this corpus (a directory with corpus.jsonl, R2MED or BEIR rows) instead of each "
                         "dataset's own")
    add(ag, flag_sets())
    ag.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    ag.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    ag.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    ag.add_argument("--top-k", type=positive_int, default=100, help="documents kept in the agent's ranking (default 100)")
    add_recompute_options(ag, caches="indexes and embeddings")
    ag.add_argument("--json", action="store_true", help="print the scores and the agent's counts as JSON")
    add_dry_run(ag)
    ag.set_defaults(func=cmd_agent)
