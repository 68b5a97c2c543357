"""``r2med models list``: the dense model zoo."""

from __future__ import annotations

import argparse

from r2med.cli.args import emit_json as _emit_json


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


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``models`` to the ``r2med`` subcommands (``common``: the -q/-v options)."""
    md = sub.add_parser("models", parents=[common], help="the dense model zoo")
    md_sub = md.add_subparsers(dest="models_command", metavar="ACTION")
    ml = md_sub.add_parser("list", parents=[common], help="models with size, backend, pooling, max length; --instructions for every dataset's")
    ml.add_argument("--instructions", action="store_true", help="also print each model's query/document instruction per dataset")
    ml.add_argument("--json", action="store_true")
    ml.set_defaults(func=cmd_models_list)
