"""``r2med reproduce SYSTEM``: a published configuration, ours next to the paper's numbers; ``--list`` every plan,
``--dry-run`` one (nothing loaded, nothing contacted)."""

from __future__ import annotations

import argparse
from pathlib import Path

from r2med.cli.args import add_recompute_options, progress_printer
from r2med.cli.args import csv_list as _csv
from r2med.cli.args import emit_json as _emit_json
from r2med.cli.args import pct as _pct
from r2med.errors import MissingResourceError, UsageError
from r2med.store.results import SystemPath


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.list:
        if args.system is not None:
            raise UsageError(f"--list shows every system; drop {args.system!r} (or drop --list to reproduce it)")
        return _list(args)
    if args.system is None:
        raise UsageError("name the SYSTEM to reproduce (e.g. 'base retriever/bm25'), or pass --list to see them all")
    from r2med.reproduce import plan_for

    plan = plan_for(args.system, first_stage=args.first_stage)
    if args.dry_run:
        return _dry_run(plan, args)
    return _reproduce(plan, args)


def _needs_text(needs: list[dict]) -> str:
    return ", ".join(dict.fromkeys(n["kind"] for n in needs)) or "-"


def _list(args: argparse.Namespace) -> int:
    from r2med.reporting.tables import markdown_table, md_text
    from r2med.reproduce import list_plans

    entries = list_plans()
    if args.json:
        _emit_json(entries)
        return 0
    body = []
    for e in entries:
        plan = e["plan"]
        if plan is None:
            body.append([e["rank"] or "-", md_text(e["system"]), f"{e['average']:.2f}", "-", "-", "-",
                         md_text(f"no plan: {e['problem']}")])
            continue
        expansion = plan["expansion"]
        shown = "-" if expansion is None else f"{expansion['spec']} ({expansion['source']})"
        first = plan["first_stage"]
        reranker = "-" if plan["reranker"] is None else f"{plan['reranker']} top {plan['rerank_top_k']} of {first['system']}"
        body.append([e["rank"] or "-", md_text(e["system"]), f"{e['average']:.2f}",
                     md_text(plan["retriever"] or first["runs"]), md_text(shown), md_text(reranker),
                     _needs_text(plan["needs"])])
    on_board = sum(e["on_leaderboard"] for e in entries)
    print(markdown_table(["#", "system", "avg", "retriever", "expansion (source)", "reranker", "needs"], body,
                         align_right=[True, False, True, False, False, False, False]))
    print(f"\n{len(entries)} systems: the {on_board} rows of the public leaderboard (#: its rank; avg: its average) "
          f"and the {len(entries) - on_board} published result folders not on it (avg: the mean of their published "
          "numbers). Expansion source 'hub': the authors' published files (the dataset directory, then r2med's "
          "generated ones, then the hub). r2med reproduce SYSTEM --dry-run shows one plan in full.")
    return 0


def _dry_run(plan, args: argparse.Namespace) -> int:
    data = plan.to_json()
    if args.json:
        _emit_json(data)
        return 0
    board = data["leaderboard"]
    print(f"{data['system']}: what r2med would run (nothing is loaded)")
    if board:
        print(f"  leaderboard: #{board['rank']} {board['name']}, average {board['average']:.2f}")
    print(f"  compared on: {'the paper per dataset' if data['compare'] == 'datasets' else 'the average (the only number published)'}")
    if data["retriever"]:
        print(f"  retriever: {data['retriever']} (top {data['top_k']})")
    if data["expansion"]:
        e = data["expansion"]
        where = (f"the authors' published {e['file']} (hub config {e['hub_config']}, split {e['hub_split']}; looked "
                 f"for in {', '.join(e['searched'])})" if e["source"] == "hub" else "generated with r2med expand")
        print(f"  expansion: {e['spec']}, {where}; answer policy {data['answer_policy']}")
    if data["first_stage"]:
        f = data["first_stage"]
        runs = "r2med's own run" if f["runs"] == "r2med" else f"stored runs {f.get('url', f['runs'])}"
        print(f"  first stage: {f['system']}, {runs}")
    if data["reranker"]:
        print(f"  reranker: {data['reranker']} over the top {data['rerank_top_k']} (only those kept)")
    print("  needs:")
    for need in plan.needs:
        print(f"    - {need.text}")
    return 0


def _reproduce(plan, args: argparse.Namespace) -> int:
    from r2med.datasets.loading import locate
    from r2med.pipeline import run_pipeline
    from r2med.reproduce import compare, load_reference, published_reference
    from r2med.settings import get_settings

    system = str(plan.system)
    settings = get_settings()
    first = None
    if args.first_stage is not None:
        from r2med.first_stages import resolve_first_stage

        names = [name for name, _ in locate(args.tasks, data_dir=args.data_dir, settings=settings)]
        get = None
        if args.timeout is not None or args.max_retries is not None:  # the download under the command's deadline
            from functools import partial

            from r2med.http.download import download
            from r2med.http.retry import RetryPolicy

            get = partial(download, **({"timeout": args.timeout} if args.timeout is not None else {}),
                          **({"policy": RetryPolicy(max_retries=args.max_retries)}
                             if args.max_retries is not None else {}))
        first = resolve_first_stage(args.first_stage, names, home=settings.home, force=args.force, get=get)
    if args.reference:
        paper = load_reference(args.reference, system, args.metric)
    else:
        paper = published_reference(system, args.metric) if plan.published else {}
    first_table = _first_stage_table(plan, first, args, settings) if first is not None else None
    spec = plan.spec(datasets=args.tasks, data_dir=args.data_dir, output=args.output, device=args.device,
                     batch_size=args.batch_size, first_stage=None if first is None else first.path,
                     timeout=args.timeout, max_retries=args.max_retries)
    stages = run_pipeline(spec, settings=settings, progress=not (args.quiet or args.json), resume=not args.force,
                          on_result=progress_printer(args, policy=spec.answer_policy))
    retriever = SystemPath.parse(next(iter(stages))).system
    results = list(stages.values())[-1]
    ours = {r.dataset: r.scores.rounded(5)[args.metric] for r in results if args.metric in r.scores.aggregate}
    if len(ours) < len(results):
        raise UsageError(f"--metric {args.metric!r} is not among the result metrics (e.g. ndcg_at_10, recall_at_100, mrr)")
    rows = compare(ours, paper, tolerance=args.tolerance)
    average = None
    if not args.reference and not plan.published:
        from r2med.reproduce import check_average

        if args.metric != "ndcg_at_10":
            raise MissingResourceError(f"{system}: the leaderboard publishes only its average nDCG@10; there is no "
                                       f"{args.metric} to compare with (use --metric ndcg_at_10, or --reference FILE)")
        assert plan.leaderboard is not None
        average = check_average(ours, plan.leaderboard.average, tolerance=args.tolerance)
    failed = [r.dataset for r in rows if r.ok is False] + (["average"] if average is not None and average.ok is False else [])
    compared = [r for r in rows if r.ok is not None] + ([average] if average is not None and average.ok is not None else [])
    if args.json:
        out = {"system": system, "metric": args.metric, "tolerance": args.tolerance,
               "ok": bool(compared) and not failed, "compared": len(compared),
               "datasets": {r.dataset: {"ours": r.ours, "paper": r.paper, "difference": r.difference, "ok": r.ok}
                            for r in rows}}
        if average is not None:
            out["average"] = {"ours": average.ours, "ours_x100": average.shown, "leaderboard": average.listed,
                              "difference_x100": average.difference, "ok": average.ok,
                              "missing": list(average.missing),
                              "note": "the leaderboard publishes only this row's average over the 8 datasets"}
        if first_table is not None:
            out["first_stage"] = first_table
        _emit_json(out)
        if not compared:
            raise _nothing_compared(ours, args.metric, average)
        return 1 if failed else 0

    def cell(value):
        return "-" if value is None else _pct(value)

    from r2med.reporting.tables import markdown_table

    if first_table is not None:
        _print_first_stage(first_table)
    table = [[r.dataset, cell(r.ours), cell(r.paper),
              "-" if r.difference is None else ("-" if r.difference < 0 else "+") + _pct(abs(r.difference)),
              {True: "ok", False: "DIFFERENT", None: "not compared"}[r.ok]] for r in rows]
    print(f"{system} ({retriever}{', answer policy ' + plan.answer_policy if plan.expansion else ''}): "
          f"{args.metric} x100, ours vs the paper, tolerance {args.tolerance * 100:.2f}")
    print(markdown_table(["dataset", "ours", "paper", "diff", "status"], table,
                         align_right=[False, True, True, True, False]))
    if average is not None:
        print(_average_line(average, plan.leaderboard))
    if not compared:  # nothing was checked: never a quiet pass
        raise _nothing_compared(ours, args.metric, average)
    if failed:
        what = "datasets" if average is None else "compared (datasets and the average)"
        print(f"{len(failed)} of {len(compared)} {what} differ by more than the tolerance: {', '.join(failed)}")
        return 1
    what = "the average matches" if average is not None else f"all {len(compared)} compared datasets match"
    print(what)
    return 0


def _average_line(average, board) -> str:
    head = (f"The leaderboard publishes only this row's average ({board.name}: {board.average:.2f}, over the 8 "
            "datasets); no per-dataset numbers, so the average is compared, to "
            f"{average.tolerance * 100:.2f}: ")
    if average.ours is None:
        return head + f"not compared, {8 - len(average.missing)} of 8 datasets were run (missing: {', '.join(average.missing)})"
    sign = "-" if average.difference < 0 else "+"
    status = "ok" if average.ok else "DIFFERENT"
    return head + f"ours {average.shown}, leaderboard {board.average:.2f}, diff {sign}{abs(average.difference):.2f}: {status}"


def _first_stage_table(plan, first, args: argparse.Namespace, settings) -> dict:
    """The stored first stage evaluated before the reranker runs, beside the paper's row of its retriever."""
    from r2med.datasets import dataset_loaders
    from r2med.reporting.official import is_published, published
    from r2med.first_stages import evaluate_first_stage
    from r2med.reproduce import compare

    loaders = dataset_loaders(list(args.tasks) if args.tasks else None, data_dir=args.data_dir, settings=settings)
    paper_row = plan.first_stage_system
    values = evaluate_first_stage(first, loaders, system=plan.system.system, metric=args.metric)
    paper = published(paper_row).values(args.metric) if paper_row and is_published(paper_row) else {}
    rows = compare(values, paper, tolerance=args.tolerance)
    out = {"source": first.source, "paper_row": paper_row,
           "published_runs": None if first.known is None else first.known["description"],
           "files": [f.to_json() for f in first.files],
           "datasets": {r.dataset: {"first_stage": r.ours, "paper": r.paper, "difference": r.difference} for r in rows}}
    if len(values) == 8 and len(paper) == 8:
        from r2med.types import exact_mean

        out["average"] = {"first_stage": exact_mean(list(values.values())), "paper": exact_mean(list(paper.values()))}
    return out


def _print_first_stage(data: dict) -> None:
    from r2med.reporting.tables import markdown_table

    def cell(value):
        return "-" if value is None else _pct(value)

    what = data["published_runs"] or data["source"]
    print(f"first stage: {what}, evaluated before reranking, beside the paper's {data['paper_row']} (x100)")
    rows = [[name, cell(v["first_stage"]), cell(v["paper"]),
             "-" if v["difference"] is None else ("-" if v["difference"] < 0 else "+") + _pct(abs(v["difference"]))]
            for name, v in data["datasets"].items()]
    if "average" in data:
        a = data["average"]
        rows.append(["average", cell(a["first_stage"]), cell(a["paper"]), "-"])
    print(markdown_table(["dataset", "first stage", "paper", "diff"], rows, align_right=[False, True, True, True]))
    checked = ", ".join(f"{f['dataset']} sha256 {f['sha256'][:12]}..." for f in data["files"])
    print(f"first-stage files (checksummed; a changed file is refused): {checked}\n")


def _nothing_compared(ours: dict[str, float], metric: str, average=None) -> MissingResourceError:
    """Exit 4: no dataset run has a reference value, so nothing was checked (never a quiet pass)."""
    if average is not None:
        return MissingResourceError(
            f"nothing was compared: the leaderboard publishes only this row's average over the 8 R2MED datasets and "
            f"{len(average.missing)} of them were not run ({', '.join(average.missing)}); run all 8 (drop --tasks), "
            'or pass --reference FILE with {"<Dataset>": {"' + metric + '": ...}}')
    return MissingResourceError(
        f"no dataset was compared: none of {', '.join(ours) or 'the datasets run'} has a reference {metric} "
        "(the paper's numbers cover the eight R2MED datasets, by their names); run R2MED datasets (--tasks, or a "
        'directory named like one) or pass --reference FILE with {"<Dataset>": {"' + metric + '": ...}}'
    )


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
                    help="print SYSTEM's plan and exit, loading and contacting nothing")
    rp.add_argument("--first-stage", default=None, metavar="PATH|URL|authors",
                    help="reranker rows: rerank these stored runs instead of r2med's own first stage: a run file (one "
                         "dataset), a directory of <Dataset> runs (or ReasonRank's r2med_<Dataset>/ layout), an http(s) "
                         "URL ({dataset} stands for each name), or 'authors' (the E5 top-100 runs ReasonRank's "
                         "authors published); checksummed, a changed file is refused (--force accepts it)")
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
    rp.add_argument("--timeout", type=_positive, default=None, metavar="X",
                    help="deadline of each request attempt in seconds, for every server the row calls (an LLM, an "
                         "embeddings API, the --first-stage download): connecting, sending and the whole answer "
                         "(default: each component's, 300; the download's 60)")
    rp.add_argument("--max-retries", type=_at_least_zero, default=None, metavar="N",
                    help="retries per request (default: each component's, 5; the download's 6)")
    add_recompute_options(rp)
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_reproduce)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 60")
    return value


def _at_least_zero(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number 0 or more, e.g. 3")
    return value
