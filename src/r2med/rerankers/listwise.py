"""Listwise reranking with an LLM over any OpenAI-compatible endpoint: a sliding window of passages per query.

Per query, windows of ``window`` passages slide over the top k (``sliding_windows``: back to front,
stride 10, by default); each window's answer is parsed into a permutation (``read_permutation``,
after ``split_reasoning`` has set a reasoning model's trace aside) that reorders that window before
the next one is built. Windows of one query are sequential; queries run side by side: each round
sends the next window of every unfinished query through ``ChatClient.complete_many``, which keeps
at most ``concurrency`` requests in flight and retries failures.

Every response is appended to a ``ResponseCache`` under the request's key (model, messages,
sampling: the prompt hash) before it is used, with its reasoning trace, so an interrupted or
repeated run sends only the windows it has not seen. The reranked run (a ``Reranked``) carries its stats and its
window log: per window the documents, the new order, what the parser repaired and the trace.

What a window's request is and how its answer is read is the reranker's ``prompt`` (a ``WindowPrompt``):
RankGPT's multi-turn conversation (``RankGPTPrompt``, the default) or ReasonRank's single message
(``r2med.rerankers.reasonrank.ReasonRankPrompt``). A client with a request budget (``Budget(max_requests=...)``)
stops sending when it is spent: the finished windows are in the cache and the call raises ``BudgetExceeded``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from r2med.errors import InvalidInputError, ProviderError, UsageError
from r2med.io.progress import progress_bar
from r2med.llm.cache import ResponseCache
from r2med.llm.client import BudgetExceeded, ChatClient, ChatJob, ChatResult, SamplingParams, request_key
from r2med.llm.reasoning import STYLES, split_reasoning
from r2med.rerankers.base import Reranked, assemble, check_texts, check_top_k, split_head
from r2med.rerankers.options import ON_ERROR
from r2med.rerankers.permutation import PermutationReport, read_permutation
from r2med.rerankers.prompts import rankgpt_messages
from r2med.rerankers.windows import apply_permutation, sliding_windows
from r2med.types import Run

logger = logging.getLogger(__name__)

TASK = "rerank-listwise/1"


@dataclass
class _Query:
    qid: str
    order: list[str]
    windows: list[tuple[int, int]]
    position: int = 0
    error: Exception | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or self.position >= len(self.windows)


@dataclass
class _Waiting:
    query: _Query
    start: int
    end: int
    docs: list[str]


@dataclass(frozen=True)
class ListwiseStats:
    """Windows of the last call: all, answered from the cache, requested, repaired answers, failed; the tokens of the
    requests this call sent (``prompt_tokens``, ``completion_tokens``; ``requests``: HTTP requests, retries included);
    ``queries`` reranked and the tokens of every window of the result, the cached ones as their records say
    (``result_prompt_tokens``, ``result_completion_tokens``: what the result costs, divided by ``queries`` per query).
    """

    windows: int
    cached: int
    requested: int
    repaired: int
    failed: int
    prompt_tokens: int
    completion_tokens: int
    queries: int = 0
    requests: int = 0
    result_prompt_tokens: int = 0
    result_completion_tokens: int = 0


class WindowPrompt(Protocol):
    """What a window's request is and how its answer is read: ``kind`` and ``task`` name it in the reranker's
    description and in the cache keys; ``job`` builds the request for one window of ``passages`` (first-stage
    ``scores`` beside them); ``parse`` reads an answer into ``(report, trace, answer)``; ``describe`` says what else
    determines the output (prompt options, tokenizer)."""

    kind: str
    task: str

    def job(self, model: str, query: str, passages: Sequence[str], scores: Sequence[float] | None,
            params: SamplingParams) -> ChatJob: ...

    def parse(self, text: str, reasoning: str | None, n: int) -> tuple[PermutationReport, str, str]: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RankGPTPrompt:
    """RankGPT's conversation (``r2med.rerankers.prompts.rankgpt_messages``) read by ``read_permutation``: passages cut
    to ``max_words`` words; ``with_scores`` shows first-stage scores (InsertRank); ``style`` the reasoning style."""

    max_words: int | None = 300
    with_scores: bool = False
    style: str = "auto"
    kind = "listwise"
    task = TASK

    def messages(self, query: str, passages: Sequence[str], scores: Sequence[float] | None) -> list[dict[str, str]]:
        return rankgpt_messages(query, passages, max_words=self.max_words, scores=scores if self.with_scores else None)

    def job(self, model: str, query: str, passages: Sequence[str], scores: Sequence[float] | None,
            params: SamplingParams) -> ChatJob:
        messages = self.messages(query, passages, scores)
        return ChatJob(request_key(model, messages, params, extra={"task": TASK}), messages, params)

    def parse(self, text: str, reasoning: str | None, n: int) -> tuple[PermutationReport, str, str]:
        parsed = split_reasoning(text, style=self.style, reasoning_content=reasoning)
        answer = "" if parsed.truncated else parsed.answer
        report = read_permutation(answer, n)
        if parsed.truncated:
            report = PermutationReport(report.order, (), (), (), report.missing, "unfinished-trace")
        return report, parsed.reasoning, answer

    def describe(self) -> dict[str, Any]:
        return {"max_words": self.max_words, "with_scores": self.with_scores, "style": self.style}


@dataclass
class ListwiseReranker:
    """Listwise reranking through ``client``, RankGPT's by default.

    ``params``: sampling (temperature 0 as RankGPT); ``max_words`` per passage; ``with_scores`` shows
    first-stage scores in the prompt (InsertRank); ``style``: the reasoning-output style (see
    ``r2med.llm.reasoning``; ``auto`` detects it); ``on_error``: ``raise`` (after every other
    query has finished, so the cache keeps their windows) or ``keep`` (a failed window keeps its order).
    ``prompt``: another ``WindowPrompt`` (ReasonRank's); ``max_words``, ``with_scores`` and ``style`` are then unused.
    """

    client: ChatClient
    name: str = "listwise"
    window: int = 20
    stride: int = 10
    direction: str = "back_to_front"
    max_words: int | None = 300
    params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0))
    cache: ResponseCache | None = None
    concurrency: int = 8
    with_scores: bool = False
    style: str = "auto"
    on_error: str = "raise"
    progress: bool = True
    prompt: WindowPrompt | None = None
    _windows: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)  # the call's window log
    _tokens: list[int] = field(default_factory=lambda: [0, 0], init=False, repr=False)  # the result's windows' tokens

    def __post_init__(self) -> None:
        if self.prompt is None:
            self.prompt = RankGPTPrompt(self.max_words, self.with_scores, self.style)
        sliding_windows(0, self.window, self.stride, direction=self.direction)  # validates all three
        if self.on_error not in ON_ERROR:
            raise UsageError(f"on_error must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}")
        if self.style != "auto" and self.style not in STYLES:
            raise UsageError(f"unknown reasoning style {self.style!r}; valid: auto, {', '.join(STYLES)}")
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.max_words is not None and self.max_words < 1:
            raise UsageError(f"max words per passage must be positive, got {self.max_words}")

    def describe(self) -> dict[str, Any]:
        """What determines this reranker's output (the endpoint's address is not part of it)."""
        prompt = self._prompt
        return {
            "kind": prompt.kind, "task": prompt.task, "name": self.name, "model": self.client.model,
            "window": self.window, "stride": self.stride, "direction": self.direction, **prompt.describe(),
            "params": self.params.to_request(), "on_error": self.on_error,
        }

    @property
    def _prompt(self) -> WindowPrompt:
        assert self.prompt is not None  # set in __post_init__
        return self.prompt

    # ---------------------------------------------------------------- prompt and parsing
    def job(self, query: str, docs: Sequence[str], corpus: Mapping[str, str], scores: Mapping[str, float] | None) -> ChatJob:
        """The request for one window of ``docs`` (its ``key`` names it in the cache: model, prompt, sampling, task)."""
        shown = [scores[d] for d in docs] if scores is not None else None
        return self._prompt.job(self.client.model, query, [corpus[d] for d in docs], shown, self.params)

    def messages(self, query: str, docs: Sequence[str], corpus: Mapping[str, str], scores: Mapping[str, float] | None) -> list[dict[str, str]]:
        """The chat messages for one window of ``docs``."""
        return self.job(query, docs, corpus, scores).messages

    def parse(self, text: str, reasoning: str | None, n: int) -> tuple[PermutationReport, str, str]:
        """``(report, trace, answer)`` for a response to a window of ``n`` passages."""
        return self._prompt.parse(text, reasoning, n)

    # ---------------------------------------------------------------- reranking
    def rerank(self, queries: Mapping[str, str], corpus: Mapping[str, str], run: Run, *, top_k: int = 100) -> Run:
        """Rerank each query's first ``top_k`` documents window by window (see the module docstring)."""
        check_top_k(top_k)
        check_texts(queries, corpus, run, top_k)
        if self.cache is not None:  # before the first request: a cache another run is writing refuses this one now
            self.cache.open_for_append()
        self._windows = []
        self._tokens = [0, 0]
        before = (self.client.usage.requests, self.client.usage.prompt_tokens, self.client.usage.completion_tokens)
        states = {}
        for qid in run:
            head = split_head(run, qid, top_k)[0]
            windows = sliding_windows(len(head), self.window, self.stride, direction=self.direction)
            # a window of one passage has one possible order: no request
            states[qid] = _Query(qid, head, [(s, e) for s, e in windows if e - s > 1])
        memo: dict[str, dict[str, Any]] = {}
        total = sum(len(s.windows) for s in states.values())
        bar = progress_bar(total, desc=f"reranking ({self.name})", unit="window", enabled=self.progress)
        try:
            while True:
                jobs: dict[str, ChatJob] = {}
                waiting: dict[str, list[_Waiting]] = {}
                for state in states.values():
                    self._advance(state, queries, corpus, run, memo, jobs, waiting, bar)
                if not jobs:
                    break

                def on_result(job: ChatJob, outcome: ChatResult | Exception, waiting=waiting) -> None:
                    record = None if isinstance(outcome, Exception) else self._store(job.key, outcome, waiting[job.key], memo)
                    for item in waiting[job.key]:
                        if record is not None:
                            self._apply(item, record, cached=False)
                        elif self.on_error == "keep":
                            logger.warning("query %s, window %d-%d: %s; the window keeps its order",
                                           item.query.qid, item.start + 1, item.end, outcome)
                            self._log(item, None, None, cached=False, error=str(outcome))
                            item.query.position += 1
                        else:
                            item.query.error = outcome  # type: ignore[assignment]
                        bar.update(1)

                try:
                    self.client.complete_many(list(jobs.values()), concurrency=self.concurrency, on_result=on_result,
                                              progress=False)
                except BudgetExceeded as exc:
                    where = f"; the finished windows are in {self.cache.path}: rerun to resume" if self.cache is not None else ""
                    raise BudgetExceeded(f"{self.name}: {exc}{where}", pending=exc.pending) from exc
        finally:
            bar.close()
            if self.cache is not None:  # its lock given back: the next run with this LLM may write it
                self.cache.close()
        # windows finish in whatever order the server answers: log them by query (run order), each query's in turn
        rank = {qid: i for i, qid in enumerate(states)}
        self._windows.sort(key=lambda entry: rank[entry["qid"]])
        failed = [s for s in states.values() if s.error is not None]
        if failed:
            where = f"; every finished window is kept in {self.cache.path}: rerun to resume" if self.cache is not None else ""
            raise ProviderError(f"{len(failed)} of {len(states)} queries could not be reranked (first: query "
                                f"{failed[0].qid}: {failed[0].error}){where}")
        reranked = assemble(run, {qid: s.order for qid, s in states.items()}, top_k, name=self.name)
        log, self._windows = self._windows, []
        usage = self.client.usage
        sent = (usage.requests - before[0], usage.prompt_tokens - before[1], usage.completion_tokens - before[2])
        stats = self._summarise(log, len(states), sent)
        return Reranked(reranked, name=self.name, stats=stats, artifacts={"windows": log}, notes=self._notes(stats))

    def _advance(self, state: _Query, queries, corpus, run, memo, jobs, waiting, bar) -> None:
        """Apply the query's next windows from the cache; queue the first one that needs a request."""
        while not state.done:
            start, end = state.windows[state.position]
            docs = state.order[start:end]
            job = self.job(queries[state.qid], docs, corpus, run[state.qid])
            key = job.key
            record = memo.get(key)
            if record is None and self.cache is not None:
                record = self.cache.get(key)
                if record is not None:  # used only in the shape r2med wrote it
                    self._check_stored(record, state.qid, start, end, key)
            item = _Waiting(state, start, end, docs)
            if record is None:
                jobs.setdefault(key, job)
                waiting.setdefault(key, []).append(item)
                return
            self._apply(item, record, cached=True)
            bar.update(1)

    def _check_stored(self, record: Mapping[str, Any], qid: str, start: int, end: int, key: str) -> None:
        """``InvalidInputError`` (exit 5) naming the cache file, the window and the fix for a stored answer that is
        not one r2med wrote (an edited line): a ``text`` that is not a string, a ``reasoning`` neither text nor null,
        token counts that are not whole numbers."""
        problems = []
        if not isinstance(record.get("text"), str):
            problems.append("no 'text' string")
        if not (record.get("reasoning") is None or isinstance(record.get("reasoning"), str)):
            problems.append("a 'reasoning' that is neither text nor null")
        for name in ("prompt_tokens", "completion_tokens"):
            value = record.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                problems.append(f"a {name!r} that is not a whole number")
        if problems:
            where = self.cache.path if self.cache is not None else "the cache"
            raise InvalidInputError(f"{where}: the stored answer for query {qid!r}, window {start + 1}-{end} (key "
                                    f"{key}) has {' and '.join(problems)}; delete that line to request it again")

    def _store(self, key: str, result: ChatResult, items: list[_Waiting], memo: dict) -> dict[str, Any]:
        first = items[0]
        record = {
            "task": self._prompt.task, "model": self.client.model, "qid": first.query.qid, "window": [first.start, first.end],
            "docids": first.docs, "text": result.text, "reasoning": result.reasoning, "finish_reason": result.finish_reason,
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "attempts": result.attempts, "seconds": round(result.seconds, 3),
        }
        if self.cache is not None:
            self.cache.append(key, record)
        memo[key] = record
        return record

    def _apply(self, item: _Waiting, record: Mapping[str, Any], *, cached: bool) -> None:
        report, trace, answer = self.parse(record.get("text") or "", record.get("reasoning"), len(item.docs))
        state = item.query
        state.order = apply_permutation(state.order, item.start, item.end, report.order)
        state.position += 1
        self._tokens[0] += int(record.get("prompt_tokens") or 0)
        self._tokens[1] += int(record.get("completion_tokens") or 0)
        self._log(item, report, record, cached=cached, trace=trace, answer=answer)

    def _log(self, item: _Waiting, report: PermutationReport | None, record: Mapping[str, Any] | None, *,
             cached: bool, trace: str = "", answer: str = "", error: str | None = None) -> None:
        entry: dict[str, Any] = {
            "qid": item.query.qid, "window": [item.start, item.end], "docids": item.docs,
            "order": [item.docs[i] for i in report.order] if report is not None else item.docs,
            "cached": cached,
        }
        if report is not None:
            entry.update(source=report.source, clean=report.clean, duplicates=list(report.duplicates),
                         out_of_range=list(report.out_of_range), missing=list(report.missing))
            # the report lists the first PermutationReport.SAMPLE of each; the counts say how many there were
            if report.duplicate_count > len(report.duplicates):
                entry["duplicate_count"] = report.duplicate_count
            if report.out_of_range_count > len(report.out_of_range):
                entry["out_of_range_count"] = report.out_of_range_count
            if report.unreadable:
                entry["unreadable"] = report.unreadable
        if record is not None:
            entry.update(finish_reason=record.get("finish_reason"), reasoning=trace, answer=answer)
        if error is not None:
            entry["error"] = error
        self._windows.append(entry)

    def _notes(self, stats: ListwiseStats) -> list[tuple[str, str]]:
        """The warning about repaired answers, for the runner to log naming the window log once it is written (a
        caller of ``rerank`` finds it in ``Reranked.notes``)."""
        if not stats.repaired:
            return []
        return [("windows", f"{self.name}: {stats.repaired} of {stats.windows} window answers were not a clean "
                            "permutation (repeats, unknown or missing identifiers, no answer); see the window log")]

    def _summarise(self, log: list[dict[str, Any]], queries: int, sent: tuple[int, int, int]) -> ListwiseStats:
        windows = len(log)
        cached = sum(1 for e in log if e["cached"])
        repaired = sum(1 for e in log if e.get("clean") is False)
        failed = sum(1 for e in log if "error" in e)
        stats = ListwiseStats(windows, cached, windows - cached, repaired, failed, sent[1], sent[2], queries=queries,
                              requests=sent[0], result_prompt_tokens=self._tokens[0],
                              result_completion_tokens=self._tokens[1])
        logger.info("%s: %d windows (%d from the cache), %d answers repaired, %d failed", self.name, windows, cached, repaired, failed)
        unparsable = [e for e in log if e.get("source") == "unparsable"]
        if unparsable:
            first = unparsable[0]
            logger.warning("%s: %d of %d window answers hold a number Python's int() refuses (first: %r, query %s, "
                           "window %d-%d); those windows keep their order, as the authors' code does", self.name,
                           len(unparsable), windows, first.get("unreadable", ""), first["qid"], first["window"][0] + 1,
                           first["window"][1])
        return stats
