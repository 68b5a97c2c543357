"""``r2med expand``: generate HyDE / Query2doc / LameR expansions with an OpenAI-compatible LLM server.

Thin: parses, builds the configuration from the parsed options in one place (``build_expand``), runs the expand
stage (``r2med.stages.expand.Expand``) over the datasets through the runner, prints a summary. Importing this
module imports nothing heavy (no ``openai``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from r2med.cli.args import csv_list as _csv
from r2med.cli.args import hidden_alias
from r2med.cli.dryrun import add_dry_run
from r2med.cli.flags import add
from r2med.errors import MissingResourceError, UsageError
from r2med.expansion.methods import gar_method, method_names

if TYPE_CHECKING:
    from r2med.expansion.generate import ExpansionConfig
    from r2med.expansion.options import ExpandOptions


def sampling_kind(base_url: str) -> str:
    """Which of the authors' sampling sets applies: "api" for api.openai.com, "local" for any other server.

    >>> sampling_kind("https://api.openai.com/v1"), sampling_kind("http://localhost:8000/v1")
    ('api', 'local')
    """
    return "api" if (urlsplit(base_url).hostname or "").lower() == "api.openai.com" else "local"


def flag_sets() -> list:
    """The generated option flags of ``expand``: the expansion's and the LLM endpoint's (``ExpandOptions``)."""
    from r2med.expansion.options import ExpandOptions
    from r2med.options import Flags

    return [Flags(ExpandOptions, required=("method", "llm_model"), title="expansion and LLM")]


def register(subparsers: argparse._SubParsersAction, common_parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``expand`` to ``subparsers`` (with ``common_parent``'s -q/-v) and return its parser."""
    ex = subparsers.add_parser(
        "expand", parents=[common_parent],
        help="generate HyDE / Query2doc / LameR expansions with an OpenAI-compatible LLM (resumable)",
        description="Generate GAR expansions per query into <out>/query_with_hydoc.jsonl (the official format), "
                    "keeping every finished generation in <out>/generations.jsonl so that a rerun requests only "
                    "what is missing. Exit 6 when some queries failed (everything else is written).",
    )
    ex.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    ex.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them")
    ex.add_argument("--first-stage", type=Path, default=None, metavar="DIR_OR_RUN",
                    help="lamer: a results directory holding <Dataset>.run (e.g. 'results/base retriever/bm25') "
                         "or one TREC / top-k JSONL run")
    ex.add_argument("--output", dest="out", type=Path, default=None, metavar="DIR",
                    help="output directory (several datasets: one subdirectory each); "
                         "default <R2MED_HOME>/expansions/<Dataset>/<method>/<llm-name>/")
    hidden_alias(ex, "--out", "--output")  # its name before issue 38: every other command says --output
    ex.add_argument("--json", action="store_true", help="print the reports as JSON")
    add_dry_run(ex)
    add(ex, flag_sets())
    ex.set_defaults(func=cmd_expand)
    return ex


def load_first_stage(path: Path, dataset: str):
    """The first-stage run for ``dataset``: ``path`` itself (a run file) or ``<path>/<dataset>.run``; a run of a
    stored result set is read only when the set matches its manifest."""
    from r2med.store.result_set import read_stored_run

    path = Path(path)
    if path.is_file():
        return read_stored_run(path, system=path.parent.name)
    candidate = path / f"{dataset}.run"
    if candidate.is_file():
        return read_stored_run(candidate, system=path.name)
    raise MissingResourceError(
        f"--first-stage {path}: no run for {dataset} (looked for {candidate}); make one with "
        f"'r2med run --retriever bm25 --tasks {dataset}' (writes 'results/base retriever/bm25/{dataset}.run')"
    )


def _summary_line(report) -> str:
    u = report.usage
    line = (f"{report.dataset}: {report.queries} queries, {report.cached} cached, {report.requested} requested, "
            f"{report.failed} failed, {report.truncated} truncated traces, {report.fell_back} fell back; "
            f"{u.requests} requests ({u.retries} retries), {u.prompt_tokens} prompt + {u.completion_tokens} completion "
            f"tokens; {report.seconds:.1f} s")
    if report.written:
        line += f" -> {report.paths['expansions']}"
    if report.reused:
        line += " (kept: made by the same configuration)"
    return line


@dataclass(frozen=True)
class ExpandCommand:
    """What one ``r2med expand`` does, from its parsed options: the expansion configuration, the chat client's
    endpoint (its options, the base URL and the budget), the datasets, where the files go and how it is shown."""

    config: ExpansionConfig
    endpoint: ExpandOptions
    base_url: str
    budget: Any
    sampling_note: str
    tasks: list[str] | None
    data_dir: Path | None
    first_stage: Path | None
    out: Path | None
    as_json: bool
    quiet: bool


def build_expand(args: argparse.Namespace) -> ExpandCommand:
    """The one reader of ``r2med expand``'s parsed options: checks them (UsageError) and builds the command."""
    from r2med.expansion.generate import ExpansionConfig
    from r2med.expansion.prompts import sampling_params
    from r2med.llm.client import Budget
    from r2med.settings import get_settings
    from r2med.store.expansions import llm_dir_name

    (flags,) = flag_sets()
    options = flags.build(args)
    if options.llm_name is not None and llm_dir_name(options.llm_name) != options.llm_name:
        # the folder name, used as given: r2med run --expansion METHOD/<llm-name> finds it
        raise UsageError(f"--llm-name {options.llm_name!r} would be stored as {llm_dir_name(options.llm_name)!r}, "
                         f"which 'r2med run --expansion {options.method}/{options.llm_name}' cannot find; "
                         f"pass --llm-name {llm_dir_name(options.llm_name)}")
    base_url = options.base_url or get_settings().openai_base_url
    if not base_url:
        raise UsageError("--base-url is required (or set $OPENAI_BASE_URL), e.g. --base-url http://localhost:8000/v1")
    if gar_method(options.method).first_stage and args.first_stage is None:
        raise UsageError(f"--method {options.method} needs --first-stage (a results directory or run of the "
                         "first-stage retriever)")
    if not gar_method(options.method).first_stage and args.first_stage is not None:
        raise UsageError(f"--first-stage is only for --method {' / '.join(method_names(first_stage=True))}, "
                         f"not {options.method}")
    options.api_key()  # an unset --api-key-env variable is an error before any work
    kind = sampling_kind(base_url)
    sampling, given = options.sampling(sampling_params(kind)), options.given_sampling()
    budget = Budget(options.max_requests, options.max_tokens_budget)
    config = ExpansionConfig(options.method, str(options.llm_model), base_url, sampling, style=options.style,
                             policy=options.policy, concurrency=options.concurrency, budget=budget,
                             llm_name=options.llm_name or llm_dir_name(str(options.llm_model)),
                             prompt_dataset=options.prompt_dataset)
    overrides = f"; given: {given}" if given else ""
    return ExpandCommand(
        config=config, endpoint=options, base_url=base_url, budget=budget,
        sampling_note=f"sampling: the authors' {kind!r} defaults{overrides} -> {sampling.to_request()}",
        tasks=args.tasks, data_dir=args.data_dir, first_stage=args.first_stage, out=args.out, as_json=args.json,
        quiet=getattr(args, "quiet", False),
    )


def cmd_expand(args: argparse.Namespace) -> int:
    from r2med.datasets import dataset_loaders
    from r2med.errors import IncompleteResultError
    from r2med.llm.client import BudgetExceeded
    from r2med.stages.expand import Expand
    from r2med.stages.runner import run_file_stage

    from r2med.cli.dryrun import command_of, show_plan
    from r2med.planning import plan_expand

    command = build_expand(args)
    quiet, as_json = command.quiet, command.as_json
    config = command.config
    planned = plan_expand(config, base_url=command.base_url, api_key_env=command.endpoint.api_key_env,
                          tasks=command.tasks, data_dir=command.data_dir, first_stage=command.first_stage,
                          out=command.out, check=lambda names: _check_prompts(config.method, config.prompt_dataset, names),
                          command=command_of(args))
    if args.dry_run:
        return show_plan(planned, as_json=as_json, title="r2med expand: the plan (nothing was loaded or contacted)")
    if not quiet:
        print(command.sampling_note, file=sys.stderr)
    targets = dataset_loaders(command.tasks, data_dir=command.data_dir)
    first_stage = command.first_stage
    stage = Expand(command.config, out_dir=command.out, subfolders=len(targets) > 1, client=command.endpoint.client(command.base_url, budget=command.budget),
                   first_stage=None if first_stage is None else (lambda name: load_first_stage(first_stage, name)),
                   progress=not (quiet or as_json))
    reports: list = []

    def on_result(result) -> None:
        reports.append(result.outcome)
        if len(targets) > 1 and not as_json and not quiet:  # progress between datasets
            print(_summary_line(result.outcome), file=sys.stderr)

    try:
        run_file_stage(stage, [load for _, load in targets], on_result=on_result)
    except BudgetExceeded as exc:
        if exc.report is not None:
            reports.append(exc.report)
        _print(reports, as_json, quiet)
        raise
    except IncompleteResultError:  # the failed queries are listed below
        _print(reports, as_json, quiet)
        return 6
    _print(reports, as_json, quiet)
    return 0


def _check_prompts(method: str, prompt_dataset: str | None, names: list[str]) -> None:
    """Before any dataset is loaded or any request sent: every dataset has a prompt (its own, or
    ``--prompt-dataset``'s); a collection outside R2MED is told to pass ``--prompt-dataset``."""
    from r2med.datasets.catalog import get_spec
    from r2med.expansion.prompts import prompt_template

    if prompt_dataset is not None:
        try:
            get_spec(prompt_dataset)
        except UsageError as exc:
            raise UsageError(f"--prompt-dataset {prompt_dataset}: {exc}") from None
    for name in names:
        prompt_template(method, prompt_dataset or name)


def _print(reports: list, as_json: bool, quiet: bool) -> None:
    if as_json:
        print(json.dumps({r.dataset: r.as_dict() for r in reports}, indent=2, ensure_ascii=False))
        return
    if quiet and not any(r.failed for r in reports):
        return
    for r in reports:
        print(_summary_line(r))
        for qid, message in list(r.failures.items())[:5]:
            print(f"  failed {qid}: {message}")
        if len(r.failures) > 5:
            print(f"  ... and {len(r.failures) - 5} more failed queries (rerun to retry them)")
    if len(reports) > 1:
        total = {k: sum(getattr(r, k) for r in reports) for k in ("queries", "cached", "requested", "failed",
                                                                     "truncated", "fell_back")}
        tokens = sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in reports)
        print("total: " + ", ".join(f"{v} {k}" for k, v in total.items()) + f", {tokens} tokens")
