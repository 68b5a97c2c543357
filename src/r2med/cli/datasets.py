"""``r2med datasets list|download|expansions|stats|validate|sample``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med.cli.args import emit_json as _emit_json


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
            "warnings": problems.warnings + problems.infos,  # validate lists everything it found
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


def cmd_datasets_sample(args: argparse.Namespace) -> int:
    from r2med.datasets.sample import SAMPLE_LICENCE, copy_sample, sample_files

    target = copy_sample(args.dir)
    counts = {name: data.count(b"\n") for name, data in sample_files().items() if name.endswith(".jsonl")}
    if args.json:
        _emit_json({"path": str(target), "queries": counts["query.jsonl"], "documents": counts["corpus.jsonl"],
                    "judgements": counts["qrels.jsonl"], "licence": SAMPLE_LICENCE})
        return 0
    print(f"{target}: SciFact sample, {counts['query.jsonl']} queries, {counts['corpus.jsonl']} documents, "
          f"{counts['qrels.jsonl']} judgements (licence {SAMPLE_LICENCE}, see its README.md)")
    if not args.quiet:
        print(f"next: r2med run --data-dir {args.dir}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``datasets`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    ds = sub.add_parser("datasets", parents=[common], help="list, download, describe and check datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", metavar="ACTION")
    ls = ds_sub.add_parser("list", parents=[common], help="the 8 R2MED datasets, their pinned revisions and whether they are cached")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_datasets_list)
    dl = ds_sub.add_parser("download", parents=[common], help="download datasets at their pinned revisions into R2MED_HOME")
    dl.add_argument("names", nargs="*", help="dataset names or 'all' (default all)")
    dl.add_argument("--force", action="store_true", help="download again even when cached")
    dl.add_argument("--json", action="store_true")
    dl.set_defaults(func=cmd_datasets_download)
    ex = ds_sub.add_parser("expansions", parents=[common], help="the LLM expansion sets available per dataset (--expansion METHOD/LLM)")
    ex.add_argument("names", nargs="*", help="dataset names or 'all' (default: all, or every dataset under --data-dir)")
    ex.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them")
    ex.add_argument("--local", action="store_true", help="do not list the hub repos (what is on this machine only)")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=cmd_datasets_expansions)
    sa = ds_sub.add_parser("sample", parents=[common],
                           help="copy the small SciFact sample r2med ships (50 queries, licence CC BY-NC 2.0) into DIR")
    sa.add_argument("dir", nargs="?", type=Path, default=Path("r2med-sample"), metavar="DIR",
                    help="where to put it (default ./r2med-sample); the dataset lands in DIR/scifact-sample")
    sa.add_argument("--json", action="store_true")
    sa.set_defaults(func=cmd_datasets_sample)
    for action, func, text in (
        ("stats", cmd_datasets_stats, "per-dataset statistics as in R2MED's README (#Q, #D, avg positives, lengths)"),
        ("validate", cmd_datasets_validate, "check every file and report every problem; exit 5 when unusable"),
    ):
        p = ds_sub.add_parser(action, parents=[common], help=text)
        p.add_argument("names", nargs="*", help="dataset names or 'all' (default: all, or every dataset under --data-dir)")
        p.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them (default: the hub cache)")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
