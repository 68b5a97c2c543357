"""``docs/options.md``: every generated option of every command, from the components' declarations."""

from __future__ import annotations

from collections.abc import Callable

from r2med.options import Flags, doc_rows


def command_flags() -> dict[str, Callable[[], list[Flags]]]:
    from r2med.cli import agent, expand, fuse, reproduce, rerank, run, serve

    return {"run": run.flag_sets, "rerank": rerank.flag_sets, "expand": expand.flag_sets, "agent": agent.flag_sets,
            "fuse": fuse.flag_sets, "serve": serve.flag_sets, "reproduce": reproduce.flag_sets}


def options_markdown() -> str:
    """``docs/options.md``: every generated option of every command (a test keeps the file equal to this)."""
    from r2med.reporting.tables import markdown_table

    intro = ("Generated from the components' declarations (`r2med.options`) by `python tools/gen_options_doc.py`; "
             "`tests/test_options.py` keeps this page equal to them. The *key* column is the option's key in a "
             "pipeline file's table (`r2med run --config`) and in the inline form `--retriever NAME:key=value,...`; "
             "`-` means flag only.")
    parts = ["# Options", "", intro, ""]
    for command, make in command_flags().items():
        parts += [f"## r2med {command}", ""]
        for flags in make():
            rows = doc_rows(flags)
            if not rows:
                continue
            parts += [f"### {flags.title or flags.cls.__name__} (`{flags.cls.__module__}.{flags.cls.__name__}`)", ""]
            parts.append(markdown_table(["flag", "key", "type", "default", "meaning"], rows,
                                        align_right=[False] * 5))
            parts.append("")
    return "\n".join(parts)
