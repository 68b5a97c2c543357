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
from r2med.cli.args import positive_int as _positive
from r2med.errors import MissingResourceError, UsageError
from r2med.expansion.methods import gar_method, method_names
from r2med.expansion.prompts import METHODS
from r2med.llm.reasoning import POLICIES, STYLES

if TYPE_CHECKING:
    from r2med.expansion.generate import ExpansionConfig


def sampling_kind(base_url: str) -> str:
    """Which of the authors' sampling sets applies: "api" for api.openai.com, "local" for any other server.

    >>> sampling_kind("https://api.openai.com/v1"), sampling_kind("http://localhost:8000/v1")
    ('api', 'local')
    """
    return "api" if (urlsplit(base_url).hostname or "").lower() == "api.openai.com" else "local"


def register(subparsers: argparse._SubParsersAction, common_parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``expand`` to ``subparsers`` (with ``common_parent``'s -q/-v) and return its parser."""
    ex = subparsers.add_parser(
        "expand", parents=[common_parent],
        help="generate HyDE / Query2doc / LameR expansions with an OpenAI-compatible LLM (resumable)",
        description="Generate GAR expansions per query into <out>/query_with_hydoc.jsonl (the official format), "
                    "keeping every finished generation in <out>/generations.jsonl so that a rerun requests only "
                    "what is missing. Exit 6 when some queries failed (everything else is written).",
    )
    ex.add_argument("--method", required=True, choices=METHODS, help="GAR method")
    ex.add_argument("--llm-model", required=True, metavar="MODEL", help="model id the server knows (sent as 'model')")
    ex.add_argument("--llm-name", default=None, metavar="NAME",
                    help="name of the LLM in paths and for its reasoning style (default: a safe form of --llm-model)")
    ex.add_argument("--base-url", default=None, metavar="URL",
                    help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL)")
    ex.add_argument("--api-key-env", default=None, metavar="NAME",
                    help="environment variable holding the API key (default OPENAI_API_KEY; local servers need none)")
    ex.add_argument("--concurrency", type=_positive, default=8, help="requests in flight at once (default 8)")
    ex.add_argument("--temperature", type=float, default=None)
    ex.add_argument("--top-p", type=float, default=None)
    ex.add_argument("--max-tokens", type=_positive, default=None, help="completion tokens per request")
    ex.add_argument("--seed", type=int, default=None)
    ex.add_argument("--max-requests", type=_positive, default=None, help="budget: HTTP requests for the whole run")
    ex.add_argument("--max-tokens-budget", type=_positive, default=None,
                    help="budget: prompt + completion tokens for the whole run")
    ex.add_argument("--timeout", type=float, default=300.0, help="seconds per request attempt (default 300)")
    ex.add_argument("--max-retries", type=int, default=5, help="retries per request (default 5)")
    ex.add_argument("--policy", choices=POLICIES, default="fallback",
                    help="a reasoning trace cut off before its answer: fallback = the plain query (default), "
                         "authors = the whole text (the official code), error = a failed query")
    ex.add_argument("--style", choices=("auto", *STYLES), default="auto", help="reasoning output style (default: from the LLM name)")
    ex.add_argument("--tasks", type=_csv, default=None, metavar="NAMES",
                    help="comma-separated dataset names or 'all' (default: all 8, or every dataset under --data-dir)")
    ex.add_argument("--data-dir", type=Path, default=None, help="one dataset directory or a directory of them")
    ex.add_argument("--prompt-dataset", default=None, metavar="NAME",
                    help="use this R2MED dataset's prompts (for a dataset outside R2MED; default: the dataset's own)")
    ex.add_argument("--first-stage", type=Path, default=None, metavar="DIR_OR_RUN",
                    help="lamer: a results directory holding <Dataset>.run (e.g. 'results/base retriever/bm25') "
                         "or one TREC / top-k JSONL run")
    ex.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="output directory (several datasets: one subdirectory each); "
                         "default <R2MED_HOME>/expansions/<Dataset>/<method>/<llm-name>/")
    ex.add_argument("--json", action="store_true", help="print the reports as JSON")
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
    settings, the datasets, where the files go and how the result is shown."""

    config: ExpansionConfig
    client: dict[str, Any]
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
    from r2med.llm.client import Budget, SamplingParams
    from r2med.settings import get_secret, get_settings
    from r2med.store.expansions import llm_dir_name

    if args.llm_name is not None:  # the folder name, used as given: r2med run --expansion METHOD/<llm-name> finds it
        from r2med.io.names import check_name

        check_name(args.llm_name, what="--llm-name", fix="use a plain name such as 'qwen-7b'")
        if llm_dir_name(args.llm_name) != args.llm_name:
            raise UsageError(f"--llm-name {args.llm_name!r} would be stored as {llm_dir_name(args.llm_name)!r}, which "
                             f"'r2med run --expansion {args.method}/{args.llm_name}' cannot find; "
                             f"pass --llm-name {llm_dir_name(args.llm_name)}")
    base_url = args.base_url or get_settings().openai_base_url
    if not base_url:
        raise UsageError("--base-url is required (or set $OPENAI_BASE_URL), e.g. --base-url http://localhost:8000/v1")
    if gar_method(args.method).first_stage and args.first_stage is None:
        raise UsageError(f"--method {args.method} needs --first-stage (a results directory or run of the first-stage retriever)")
    if not gar_method(args.method).first_stage and args.first_stage is not None:
        raise UsageError(f"--first-stage is only for --method {' / '.join(method_names(first_stage=True))}, not {args.method}")
    api_key = None
    if args.api_key_env:
        api_key = get_secret(args.api_key_env)
        if api_key is None:
            raise UsageError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    kind = sampling_kind(base_url)
    values = sampling_params(kind)
    given = {k: getattr(args, k) for k in ("temperature", "top_p", "max_tokens", "seed") if getattr(args, k) is not None}
    sampling = SamplingParams(**{**values, **given})
    budget = Budget(args.max_requests, args.max_tokens_budget)
    config = ExpansionConfig(args.method, args.llm_model, base_url, sampling, style=args.style, policy=args.policy,
                             concurrency=args.concurrency, budget=budget,
                             llm_name=args.llm_name or llm_dir_name(args.llm_model), prompt_dataset=args.prompt_dataset)
    overrides = f"; given: {given}" if given else ""
    return ExpandCommand(
        config=config,
        client={"model": args.llm_model, "base_url": base_url, "api_key": api_key, "timeout": args.timeout,
                "max_retries": args.max_retries, "budget": budget},
        sampling_note=f"sampling: the authors' {kind!r} defaults{overrides} -> {sampling.to_request()}",
        tasks=args.tasks, data_dir=args.data_dir, first_stage=args.first_stage, out=args.out, as_json=args.json,
        quiet=getattr(args, "quiet", False),
    )


def cmd_expand(args: argparse.Namespace) -> int:
    from r2med.datasets import dataset_loaders
    from r2med.errors import IncompleteResultError
    from r2med.llm.client import BudgetExceeded, ChatClient
    from r2med.stages.expand import Expand
    from r2med.stages.runner import run_file_stage

    command = build_expand(args)
    quiet, as_json = command.quiet, command.as_json
    if not quiet:
        print(command.sampling_note, file=sys.stderr)
    targets = dataset_loaders(command.tasks, data_dir=command.data_dir)
    _check_prompts(command.config.method, command.config.prompt_dataset, [name for name, _ in targets])
    first_stage = command.first_stage
    stage = Expand(command.config, out_dir=command.out, subfolders=len(targets) > 1, client=ChatClient(**command.client),
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
