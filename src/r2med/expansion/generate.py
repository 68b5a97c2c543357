"""Generate GAR expansions (HyDE, Query2doc, LameR) with an LLM, resumably, in the official file format.

For each query of a dataset: the method's prompt for the dataset (``prompts.build_prompt``; LameR with the
texts of the first-stage run's top 10 documents), sent as the authors' chat (system + user turn) with the
given sampling. Every finished generation is appended at once to ``<out>/generations.jsonl`` (the
cache, keyed by ``request_key``: model + messages + sampling, seed included), so a killed run resumes
without repeating a finished request. At the end ``<out>/query_with_hydoc.jsonl`` is written atomically
in dataset order (``{"id", "text", "hy_doc", ...}``, hy_doc = the chosen answer), and ``<out>/summary.json``.

A query whose generation failed is not written (never with an empty hy_doc): it is listed in the report,
and a rerun requests just those.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from r2med import __version__
from r2med.datasets.model import Dataset
from r2med.errors import InvalidInputError, ProviderError, UsageError
from r2med.expansion import prompts
from r2med.expansion.methods import gar_method, method_names
from r2med.http import safe_url
from r2med.io.atomic import write_jsonl_atomic, write_text_atomic
from r2med.io.names import check_name
from r2med.llm import reasoning
from r2med.llm.cache import ResponseCache
from r2med.llm.client import Budget, BudgetExceeded, ChatClient, ChatJob, ChatResult, SamplingParams, Usage, request_key
from r2med.settings import Settings
from r2med.types import Run

logger = logging.getLogger(__name__)

GENERATIONS_FILE = "generations.jsonl"
EXPANSION_FILE = "query_with_hydoc.jsonl"
SUMMARY_FILE = "summary.json"
#: LameR's passages: the first-stage run's top 10 documents (the authors' truncation).
LAMER_TOP_K = 10

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def llm_dir_name(name: str) -> str:
    """A filesystem-safe directory name for an LLM name or model id.

    >>> llm_dir_name("qwen-7b"), llm_dir_name("Qwen/Qwen2.5-7B-Instruct"), llm_dir_name("/models/my model/")
    ('qwen-7b', 'Qwen_Qwen2.5-7B-Instruct', 'models_my_model')
    """
    safe = _UNSAFE.sub("_", name.strip()).strip("._-+")
    if not safe:
        raise UsageError(f"LLM name {name!r} has no usable characters for a directory name; pass --llm-name")
    return check_name(safe, what=f"the folder name of LLM {name[:60]!r}", fix="pass a shorter --llm-name")


def expansion_dir(settings: Settings, dataset_name: str, method: str, llm_name: str) -> Path:
    """Where generated expansions go by default (and where ``r2med run --expansion`` looks).

    >>> from r2med.settings import get_settings
    >>> expansion_dir(get_settings({"R2MED_HOME": "/h"}), "Biology", "hyde", "Qwen/Qwen2.5-7B").as_posix()
    '/h/expansions/Biology/hyde/Qwen_Qwen2.5-7B'
    """
    check_name(dataset_name, what="the dataset name")
    check_name(method, what="the GAR method name")
    return settings.home / "expansions" / dataset_name / method / llm_dir_name(llm_name)


@dataclass(frozen=True)
class ExpansionConfig:
    """What to generate and how. ``style``: a reasoning style or "auto" (from the LLM's name, else the tags);
    ``policy``: what a trace cut off before its answer becomes ("fallback": the plain query, "authors": the
    whole text, "error": a failed query). ``prompt_dataset`` chooses whose prompts a dataset outside R2MED
    uses; ``llm_name`` is the name used for the reasoning style and the system prompt (default: the model id)."""

    method: str
    llm_model: str
    base_url: str
    sampling: SamplingParams
    style: str = "auto"
    policy: str = "fallback"
    concurrency: int = 8
    budget: Budget | None = None
    llm_name: str | None = None
    prompt_dataset: str | None = None

    @property
    def name(self) -> str:
        return self.llm_name or self.llm_model


@dataclass
class ExpansionReport:
    """What one ``generate_expansions`` call did; ``usage`` counts only this call's requests."""

    dataset: str
    method: str
    llm: str
    queries: int = 0
    cached: int = 0
    requested: int = 0
    failed: int = 0
    truncated: int = 0
    fell_back: int = 0
    written: int = 0
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    paths: dict[str, Path] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    stopped: str | None = None

    @property
    def complete(self) -> bool:
        """Every query has its expansion in the output file."""
        return self.written == self.queries

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["usage"] = self.usage.as_dict()
        out["paths"] = {k: str(v) for k, v in self.paths.items()}
        return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _passages(dataset: Dataset, first_stage: Run) -> dict[str, list[str]]:
    """The texts of each query's top-``LAMER_TOP_K`` documents; InvalidInputError listing every gap."""
    corpus = dataset.corpus
    found: dict[str, list[str]] = {}
    problems: list[str] = []
    for qid in dataset.queries:
        if qid not in first_stage:
            problems.append(f"query {qid!r} has no ranking in the first-stage run")
            continue
        top = [did for did, _ in first_stage.ranked(qid)[:LAMER_TOP_K]]
        missing = [did for did in top if did not in corpus]
        if missing:
            problems.append(f"query {qid!r}: documents {', '.join(map(repr, missing[:5]))} are not in {dataset.name}'s corpus")
            continue
        found[qid] = [corpus[did] for did in top]
    if problems:
        raise InvalidInputError(
            f"the first-stage run '{first_stage.name}' does not fit {dataset.name} ({len(problems)} problems); "
            f"use a run of this dataset (e.g. 'r2med run --retriever bm25' writes '<out>/base retriever/bm25/{dataset.name}.run')",
            problems,
        )
    return found


def _parse_style(config: ExpansionConfig) -> str:
    if config.style != "auto":
        return config.style
    named = reasoning.style_for_llm(config.name, method=config.method)
    return named if named != "plain" else "auto"  # unknown names: recognise tags if the output has them


def _parse(record: dict[str, Any], style: str) -> reasoning.ParsedOutput:
    parsed = reasoning.split_reasoning(record["text"], style=style, reasoning_content=record.get("reasoning_content"))
    # a separate trace (vLLM's reasoning parser) that hit max_tokens before any answer
    if not parsed.truncated and not parsed.answer and parsed.reasoning and record.get("finish_reason") == "length":
        parsed = reasoning.ParsedOutput(parsed.raw, parsed.reasoning, "", True, parsed.style)
    return parsed


def _record(qid: str, dataset: Dataset, config: ExpansionConfig, params: SamplingParams, prompt_sha: str,
            result: ChatResult, style: str) -> dict[str, Any]:
    finished = _now()
    record: dict[str, Any] = {
        "qid": qid, "dataset": dataset.name, "method": config.method, "model": config.llm_model, "llm": config.name,
        "base_url": safe_url(config.base_url), "text": result.text, "reasoning_content": result.reasoning,
        "finish_reason": result.finish_reason,
    }
    parsed = _parse(record, style)
    record.update({
        "reasoning": parsed.reasoning, "answer": parsed.answer, "truncated": parsed.truncated, "style": parsed.style,
        "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens},
        "attempts": result.attempts, "seconds": round(result.seconds, 3), "sampling": params.to_request(),
        "seed": params.seed, "prompt_sha256": prompt_sha,
        "started_at": datetime.fromtimestamp(time.time() - result.seconds, timezone.utc).isoformat(timespec="milliseconds"),
        "finished_at": finished, "r2med": __version__,
    })
    return record


def generate_expansions(
    dataset: Dataset,
    config: ExpansionConfig,
    *,
    out_dir: Path,
    client: ChatClient | None = None,
    first_stage: Run | None = None,
    progress: bool = True,
) -> ExpansionReport:
    """Expand every query of ``dataset``; reuse what ``<out_dir>/generations.jsonl`` already holds.

    Returns the report; failed queries are listed in ``report.failures`` and left out of the output file.
    When the client's budget runs out, the output is written for what is done and ``BudgetExceeded``
    (with ``.report``) is raised. ``client`` defaults to a ``ChatClient`` for ``config``.
    """
    start = time.perf_counter()
    method = config.method.strip().lower()
    if method not in prompts.METHODS:
        raise UsageError(f"unknown GAR method {config.method!r}; valid: {', '.join(prompts.METHODS)}")
    if config.policy not in reasoning.POLICIES:
        raise UsageError(f"unknown answer policy {config.policy!r}; valid: {', '.join(reasoning.POLICIES)}")
    if config.style != "auto" and config.style not in reasoning.STYLES:
        raise UsageError(f"unknown reasoning style {config.style!r}; valid: auto, {', '.join(reasoning.STYLES)}")
    if gar_method(method).first_stage and first_stage is None:
        raise UsageError(f"{method} needs a first-stage run (its top {LAMER_TOP_K} documents fill the prompt); "
                         "pass first_stage= (CLI: --first-stage RESULTS_DIR_OR_RUN, e.g. a BM25 run of r2med run)")
    if not gar_method(method).first_stage and first_stage is not None:
        only = " / ".join(method_names(generated=True, first_stage=True))
        raise UsageError(f"{method} does not use a first-stage run; only {only} does")
    prompt_dataset = config.prompt_dataset or dataset.name
    prompt_sha = prompts.prompt_sha256(method, prompt_dataset)
    passages = _passages(dataset, first_stage) if first_stage is not None else {}
    system = prompts.system_prompt_for(config.name)
    style = _parse_style(config)
    out_dir = Path(out_dir)
    report = ExpansionReport(dataset.name, method, config.name, queries=len(dataset.queries))
    report.paths = {"generations": out_dir / GENERATIONS_FILE, "expansions": out_dir / EXPANSION_FILE,
                    "summary": out_dir / SUMMARY_FILE}

    keys: dict[str, str] = {}
    jobs: dict[str, ChatJob] = {}
    cache = ResponseCache(report.paths["generations"])
    try:
        for qid, text in dataset.queries.items():
            prompt = prompts.build_prompt(method, prompt_dataset, text, passages.get(qid) if passages else None)
            messages = prompts.chat_messages(prompt, system=system)
            key = request_key(config.llm_model, messages, config.sampling)
            keys[qid] = key
            if key in cache:
                report.cached += 1
            elif key not in jobs:
                jobs[key] = ChatJob(key, messages, config.sampling)
        report.requested = len(jobs)
        logger.info("%s %s/%s: %d queries, %d already generated in %s, %d to request", dataset.name, method,
                    config.name, len(keys), report.cached, cache.path, len(jobs))
        first_qid = {}
        for qid, key in keys.items():
            first_qid.setdefault(key, qid)
        errors: dict[str, str] = {}

        def on_result(job: ChatJob, outcome: ChatResult | Exception) -> None:
            if isinstance(outcome, Exception):
                errors[job.key] = str(outcome)
                return
            cache.append(job.key, _record(first_qid[job.key], dataset, config, job.params, prompt_sha, outcome, style))

        stopped: BudgetExceeded | None = None
        if jobs:
            client = client or ChatClient(config.llm_model, config.base_url, budget=config.budget)
            before = client.usage.as_dict()
            try:
                client.complete_many(list(jobs.values()), concurrency=config.concurrency, on_result=on_result,
                                     progress=progress, desc=f"{dataset.name}: {method} {config.name}", unit="query")
            except BudgetExceeded as exc:
                report.stopped, stopped = str(exc), exc
            finally:
                report.usage = Usage(**{k: v - before[k] for k, v in client.usage.as_dict().items()})
        rows = _rows(dataset, config, keys, cache, errors, style, report)
    finally:
        cache.close()

    if rows:
        write_jsonl_atomic(report.paths["expansions"], rows)
    report.written = len(rows)
    report.seconds = time.perf_counter() - start
    summary = {"report": report.as_dict(), "config": {**asdict(config), "base_url": safe_url(config.base_url)},
               "prompt_dataset": prompt_dataset, "prompt_sha256": prompt_sha, "style": style, "written_at": _now()}
    write_text_atomic(report.paths["summary"], json.dumps(summary, indent=2, ensure_ascii=False, default=str))
    if report.failures:
        logger.warning("%s: %d of %d queries failed and are not in %s (rerun to retry them); first: %s",
                       dataset.name, report.failed, report.queries, report.paths["expansions"],
                       next(iter(report.failures.items())))
    if stopped is not None:
        stopped.report = report
        raise stopped
    return report


def _rows(dataset: Dataset, config: ExpansionConfig, keys: dict[str, str], cache: ResponseCache,
          errors: dict[str, str], style: str, report: ExpansionReport) -> list[dict[str, Any]]:
    """The output rows in dataset order; fills the failure, truncation and fallback counts of ``report``."""
    rows = []
    for qid, key in keys.items():
        text = dataset.queries[qid]
        record = cache.get(key)
        if record is None:
            report.failures[qid] = errors.get(key, "not generated (the run stopped before this query)")
            continue
        parsed = _parse(record, style)
        report.truncated += parsed.truncated
        try:
            answer, fell_back = reasoning.choose_answer(parsed, fallback=text, policy=config.policy)
        except ProviderError as exc:  # policy "error"
            report.failures[qid] = str(exc)
            continue
        if not answer.strip():  # never an empty expansion, whatever the policy
            answer, fell_back = text, True
        report.fell_back += fell_back
        extra = {k: v for k, v in dataset.query_fields.get(qid, {}).items() if k not in ("id", "text", "hy_doc")}
        rows.append({"id": qid, "text": text, "hy_doc": answer, **extra,
                     "answer_policy": config.policy, "style": parsed.style,
                     "truncated": parsed.truncated, "fell_back": fell_back})
    report.failed = len(report.failures)
    return rows
