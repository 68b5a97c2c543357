"""``r2med reproduce SYSTEM``: a published configuration, ours next to the paper's numbers; ``--list`` every plan,
``--dry-run`` one (nothing loaded, nothing contacted). Parses, calls ``r2med.reproduce`` and prints its comparison."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from r2med.cli.args import add_recompute_options, emit_json, number, progress_printer, whole_number
from r2med.cli.args import csv_list as _csv
from r2med.cli.flags import add
from r2med.errors import MissingResourceError, UsageError


def flag_sets() -> list:
    """The LLM endpoint's flags, from their one declaration (``LLMOptions``), as every LLM command takes them."""
    from r2med.llm.endpoint import LLMOptions
    from r2med.options import Flags, options_of
    from r2med.reproduction import ENDPOINT_OPTIONS

    skip = [opt.name for opt in options_of(LLMOptions) if opt.name not in ENDPOINT_OPTIONS]
    return [Flags(LLMOptions, skip=skip, title="LLM endpoint (--timeout and --max-retries: every server the row "
                                               "calls, the --first-stage download's too)")]


def cmd_reproduce(args: argparse.Namespace) -> int:
    from r2med.cli.flags import given

    if args.list:
        if args.system is not None:
            raise UsageError(f"--list shows every system; drop {args.system!r} (or drop --list to reproduce it)")
        return _list(args)
    if args.system is None:
        raise UsageError("name the SYSTEM to reproduce (e.g. 'base retriever/bm25'), or pass --list to see them all")
    endpoint = given(args, flag_sets())
    if args.dry_run:
        return _dry_run(args, endpoint)
    from r2med.reproduction import plan_for, reproduce

    policy = plan_for(args.system).answer_policy  # what the progress line names for a GAR row's unusable expansions
    done = reproduce(args.system, datasets=args.tasks, data_dir=args.data_dir, output=args.output,
                     first_stage=args.first_stage, reference=args.reference, metric=args.metric,
                     tolerance=args.tolerance, device=args.device, batch_size=args.batch_size, force=args.force,
                     progress=not (args.quiet or args.json), on_result=progress_printer(args, policy=policy),
                     **endpoint)
    if args.json:
        emit_json(done.to_json())
    else:
        from r2med.reporting.reproduction import comparison_text

        print(comparison_text(done))
    if not done.compared:  # nothing was checked: never a quiet pass
        hint = ('pass --reference FILE with {"<Dataset>": {"' + done.metric + '": ...}}')
        if done.average is not None:
            raise MissingResourceError(f"nothing was compared: the leaderboard publishes only this row's average over "
                                       f"the 8 R2MED datasets and {len(done.average.missing)} of them were not run "
                                       f"({', '.join(done.average.missing)}); run all 8 (drop --tasks), or {hint}")
        ran = ", ".join(r.dataset for r in done.rows if r.ours is not None) or "the datasets run"
        raise MissingResourceError(f"no dataset was compared: none of {ran} has a reference {done.metric} (the paper's "
                                   "numbers cover the eight R2MED datasets, by their names); run R2MED datasets "
                                   f"(--tasks, or a directory named like one) or {hint}")
    return 1 if done.failed else 0


def _list(args: argparse.Namespace) -> int:
    from r2med.reproduction import list_plans

    entries = list_plans()
    if args.json:
        emit_json(entries)
    else:
        from r2med.reporting.reproduction import plans_text

        print(plans_text(entries))
    return 0


def _dry_run(args: argparse.Namespace, endpoint: dict) -> int:
    """The plan, the LLM server it would call, and what it needs; nothing loaded, nothing contacted."""
    from r2med.cli.dryrun import command_of
    from r2med.reproduction import check_endpoint, check_places, llm_server, plan_for

    plan = plan_for(args.system, first_stage=args.first_stage)
    check_endpoint(plan, endpoint)
    check_places(datasets=args.tasks, data_dir=args.data_dir, output=args.output)
    command = command_of(args)  # the one given, without --dry-run (the printer of every other command's plan too)
    data = {**plan.to_json(), "llm_server": llm_server(plan, endpoint.get("base_url")),
            "command": shlex.join(["r2med", *command]) if command else None}
    if args.json:
        emit_json(data)
    else:
        from r2med.reporting.reproduction import plan_text

        print(plan_text(data, [need.text for need in plan.needs], data["llm_server"]))
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``reproduce`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    rp = sub.add_parser("reproduce", parents=[common], help="run a published system's configuration and compare with the paper's numbers")
    rp.add_argument("system", nargs="?", default=None,
                    help="official path, e.g. 'base retriever/bm25' or 'gar/hyde/gpt4/nv' (any row of the public "
                         "leaderboard or published result folder: --list)")
    rp.add_argument("--list", action="store_true",
                    help="list every leaderboard row and published result folder (93) with the plan r2med would run "
                         "and what it needs")
    rp.add_argument("--dry-run", action="store_true",
                    help="print SYSTEM's plan and the LLM server it would call, and exit, loading and contacting nothing")
    rp.add_argument("--first-stage", default=None, metavar="PATH|URL|authors",
                    help="reranker rows: rerank these stored runs instead of r2med's own first stage: a run file (one "
                         "dataset), a directory of <Dataset> runs (or ReasonRank's r2med_<Dataset>/ layout), an http(s) "
                         "URL ({dataset} stands for each name), or 'authors' (the E5 top-100 runs ReasonRank's "
                         "authors published); checksummed, a changed file is refused (--force accepts it)")
    rp.add_argument("--tasks", type=_csv, default=None, metavar="NAMES", help="dataset names or 'all' (default all 8)")
    rp.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub)")
    rp.add_argument("--output", type=Path, default=Path("results"), help="results directory (default ./results)")
    rp.add_argument("--metric", default="ndcg_at_10", help="metric compared (default ndcg_at_10)")
    rp.add_argument("--tolerance", type=number, default=0.0001,
                    help="largest accepted |ours - paper| on the 0-1 scale (default 0.0001 = 0.01 points)")
    rp.add_argument("--reference", type=Path, default=None,
                    help='JSON of reference values {"<Dataset>": {"ndcg_at_10": ...}} instead of the paper\'s')
    rp.add_argument("--device", default=None, help="dense: cpu, cuda, cuda:N or mps")
    rp.add_argument("--batch-size", type=whole_number, default=None, help="dense: encoding batch size")
    add(rp, flag_sets())
    add_recompute_options(rp)
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_reproduce)
