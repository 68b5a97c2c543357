"""Generate GAR expansions (HyDE, Query2doc, LameR) with an LLM, resumably, as the rows of the official file.

For each query of a dataset: the method's prompt for the dataset (``prompts.build_prompt``; LameR with the
texts of the first-stage run's top 10 documents), sent as the authors' chat (system + user turn) with the
given sampling. :func:`plan_expansions` makes every request before anything is sent (its ``key()`` is the
configuration that keys the expansion file); :func:`generate_expansions` sends the ones not yet answered.
Every finished generation is appended at once to ``<out>/generations.jsonl`` (the cache, keyed by
``request_key``: model + messages + sampling, seed included), so a killed run resumes without repeating a
finished request; it returns the rows of ``query_with_hydoc.jsonl`` in dataset order (``{"id", "text",
"hy_doc", ...}``, hy_doc = the chosen answer) and the report. Writing them (atomically, with a manifest) is the
expand stage's (``r2med.stages.expand``).

A query whose generation failed has no row (never an empty hy_doc): it is listed in the report, and a rerun
requests just those.
"""

from __future__ import annotations

import hashlib
import json
import logging
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
from r2med.llm import reasoning
from r2med.llm.cache import ResponseCache
from r2med.llm.client import Budget, BudgetExceeded, ChatClient, ChatJob, ChatResult, SamplingParams, Usage, request_key
from r2med.store.expansions import EXPANSION_FILE
from r2med.types import Run

logger = logging.getLogger(__name__)

GENERATIONS_FILE = "generations.jsonl"
SUMMARY_FILE = "summary.json"
#: LameR's passages: the first-stage run's top 10 documents (the authors' truncation).
LAMER_TOP_K = 10


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
    #: the stored expansion file was made by the same configuration and is kept: nothing was generated or written
    reused: bool = False

    @property
    def complete(self) -> bool:
        """Every query has its expansion in the output file."""
        return self.written == self.queries

    @classmethod
    def stored(cls, counts: dict[str, Any], paths: dict[str, Path]) -> ExpansionReport:
        """The report of a kept expansion file, from the counts its manifest records (``manifest_counts``): every
        query's answer was already stored, none was requested.

        >>> r = ExpansionReport.stored({"dataset": "B", "method": "hyde", "llm": "m", "queries": 3, "written": 3,
        ...                             "truncated": 1, "fell_back": 1}, {})
        >>> (r.cached, r.requested, r.truncated, r.reused, r.complete)
        (3, 0, 1, True, True)
        """
        return cls(counts["dataset"], counts["method"], counts["llm"], queries=counts["queries"],
                   cached=counts["queries"], truncated=counts["truncated"], fell_back=counts["fell_back"],
                   written=counts["written"], paths=dict(paths), reused=True)

    def manifest_counts(self) -> dict[str, Any]:
        """What a manifest records of this report (the counts ``stored`` makes a report of again)."""
        return {k: getattr(self, k) for k in ("dataset", "method", "llm", "queries", "written", "truncated",
                                              "fell_back")}

    def problem(self) -> str | None:
        """Why the expansion file is not complete (failed queries, a spent budget), or None."""
        if self.complete and self.stopped is None:
            return None
        first = f" (first: {next(iter(self.failures.items()))})" if self.failures else ""
        return (f"{self.failed} of {self.queries} queries have no expansion{first}; the finished ones are in "
                f"{self.paths['expansions']} and {self.paths['generations']}: rerun to retry them")

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


def _check_stored(cache: ResponseCache, qid: str, key: str) -> None:
    """``InvalidInputError`` (exit 5) naming the file, the query and the fix when the answer stored for ``key`` is
    not one r2med wrote (an edited line: no ``text`` string, a ``reasoning_content`` neither text nor null)."""
    record = cache.get(key)
    if record is None:
        return
    text, trace = record.get("text"), record.get("reasoning_content")
    if not isinstance(text, str) or not (trace is None or isinstance(trace, str)):
        what = "no 'text' string" if not isinstance(text, str) else "a 'reasoning_content' that is neither text nor null"
        raise InvalidInputError(f"{cache.path}: the stored answer of query {qid!r} (key {key}) has {what}; delete "
                                "that line to generate it again")


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


def expansion_paths(out_dir: Path) -> dict[str, Path]:
    """The files of an expansion folder: the generations cache, the expansion file and the summary."""
    out_dir = Path(out_dir)
    return {"generations": out_dir / GENERATIONS_FILE, "expansions": out_dir / EXPANSION_FILE,
            "summary": out_dir / SUMMARY_FILE}


@dataclass(frozen=True)
class ExpansionPlan:
    """Every request ``config`` makes for ``dataset``'s queries, made before anything is sent.

    ``keys``: query id -> request key (model + messages + sampling); ``jobs``: one request per distinct key.
    """

    dataset: Dataset
    config: ExpansionConfig
    method: str
    prompt_dataset: str
    prompt_sha: str
    system: str
    style: str
    keys: dict[str, str]
    jobs: dict[str, ChatJob]

    def key(self) -> dict[str, Any]:
        """The configuration an expansion file is made by (its manifest's ``config``, besides the dataset's files):
        method, model, sampling, reasoning style, answer policy, the prompt, and the sha256 of every query's
        request (which holds the prompts filled in, LameR's passages included). Not the server's address, the
        concurrency or the budget: they do not change an answer's key. The sampling is recorded as one string,
        whole (a manifest drops keys that look like credentials, such as ``max_tokens``)."""
        config = self.config
        requests = hashlib.sha256(json.dumps(list(self.keys.items())).encode("utf-8")).hexdigest()
        return {"expansion": {
            "method": self.method, "model": config.llm_model, "llm": config.name,
            "sampling": json.dumps(asdict(config.sampling), sort_keys=True), "style": config.style,
            "parsed_as": self.style, "policy": config.policy,
            "prompt": {"dataset": self.prompt_dataset, "sha256": self.prompt_sha, "system": self.system},
            "requests_sha256": requests,
        }}


def plan_expansions(dataset: Dataset, config: ExpansionConfig, first_stage: Run | None = None) -> ExpansionPlan:
    """The requests for ``dataset`` (UsageError for a bad method, policy or style, or a first-stage run the method
    needs or does not use; InvalidInputError when the first-stage run does not fit the dataset)."""
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
    passages = _passages(dataset, first_stage) if first_stage is not None else {}
    system = prompts.system_prompt_for(config.name)
    keys: dict[str, str] = {}
    jobs: dict[str, ChatJob] = {}
    for qid, text in dataset.queries.items():
        prompt = prompts.build_prompt(method, prompt_dataset, text, passages.get(qid) if passages else None)
        messages = prompts.chat_messages(prompt, system=system)
        key = request_key(config.llm_model, messages, config.sampling)
        keys[qid] = key
        jobs.setdefault(key, ChatJob(key, messages, config.sampling))
    return ExpansionPlan(dataset, config, method, prompt_dataset, prompts.prompt_sha256(method, prompt_dataset),
                         system, _parse_style(config), keys, jobs)


def generate_expansions(
    plan: ExpansionPlan,
    *,
    out_dir: Path,
    client: ChatClient | None = None,
    progress: bool = True,
) -> tuple[list[dict[str, Any]], ExpansionReport, BudgetExceeded | None]:
    """Send ``plan``'s requests that ``<out_dir>/generations.jsonl`` has no answer for; return the expansion rows
    (dataset order), the report and, when the client's budget ran out, its ``BudgetExceeded`` (what finished is in
    the rows). Failed queries are listed in ``report.failures`` and have no row. ``client`` defaults to a
    ``ChatClient`` for the plan's config."""
    start = time.perf_counter()
    dataset, config, method = plan.dataset, plan.config, plan.method
    report = ExpansionReport(dataset.name, method, config.name, queries=len(dataset.queries),
                             paths=expansion_paths(out_dir))
    cache = ResponseCache(report.paths["generations"])
    try:
        for qid, key in plan.keys.items():  # a stored answer is used only in the shape r2med wrote it
            _check_stored(cache, qid, key)
        jobs = {key: job for key, job in plan.jobs.items() if key not in cache}
        report.cached = sum(key in cache for key in plan.keys.values())
        report.requested = len(jobs)
        logger.info("%s %s/%s: %d queries, %d already generated in %s, %d to request", dataset.name, method,
                    config.name, len(plan.keys), report.cached, cache.path, len(jobs))
        first_qid: dict[str, str] = {}
        for qid, key in plan.keys.items():
            first_qid.setdefault(key, qid)
        errors: dict[str, str] = {}

        def on_result(job: ChatJob, outcome: ChatResult | Exception) -> None:
            if isinstance(outcome, Exception):
                errors[job.key] = str(outcome)
                return
            cache.append(job.key, _record(first_qid[job.key], dataset, config, job.params, plan.prompt_sha, outcome,
                                          plan.style))

        stopped: BudgetExceeded | None = None
        if jobs:
            cache.open_for_append()  # before the first request: an answer that cannot be kept is not paid for
            client = client or ChatClient(config.llm_model, config.base_url, budget=config.budget)
            before = client.usage.as_dict()
            try:
                client.complete_many(list(jobs.values()), concurrency=config.concurrency, on_result=on_result,
                                     progress=progress, desc=f"{dataset.name}: {method} {config.name}", unit="query")
            except BudgetExceeded as exc:
                report.stopped, stopped = str(exc), exc
            finally:
                report.usage = Usage(**{k: v - before[k] for k, v in client.usage.as_dict().items()})
        rows = _rows(dataset, config, plan.keys, cache, errors, plan.style, report)
    finally:
        cache.close()
    report.written = len(rows)
    report.seconds = time.perf_counter() - start
    return rows, report, stopped


def summary_text(plan: ExpansionPlan, report: ExpansionReport) -> str:
    """``summary.json``: the report, the configuration (the server's address without credentials), the prompt."""
    config = plan.config
    summary = {"report": report.as_dict(), "config": {**asdict(config), "base_url": safe_url(config.base_url)},
               "prompt_dataset": plan.prompt_dataset, "prompt_sha256": plan.prompt_sha, "style": plan.style,
               "written_at": _now()}
    return json.dumps(summary, indent=2, ensure_ascii=False, default=str)


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
