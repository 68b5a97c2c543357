"""An OpenAI-compatible chat client: bounded concurrency, counted retries with backoff, a budget.

Works against any server that speaks ``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI, vLLM,
Ollama, the llama.cpp server, a proxy). The requests go through ``r2med.http.JsonClient``, the client stack the
embedding encoders use too, with its one retry policy, error classification and key redaction: HTTP 408, 409, 429
and 5xx, timeouts, refused and dropped connections and answers without a usable choice (not JSON, no ``choices``,
empty content) are retried (exponential backoff with jitter, or exactly the wait the server asks for), and every
attempt is counted in ``usage``. What fails one job at once: any other 4xx. What stops the whole run (after the
requests in flight finish): a server that cannot be reached on any attempt (``MissingResourceError``, exit 4), a
rejected key, an unknown model or a used-up quota (``FatalProviderError``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from r2med.errors import MissingResourceError, ProviderError, UsageError
from r2med.http import (
    BadAnswer,
    FatalProviderError,
    JsonClient,
    RetryPolicy,
    check_base_url,
    excerpt,
    resolve_key,
    safe_url,
)
from r2med.io.aio import run_sync
from r2med.io.progress import progress_bar
from r2med.llm.requests import (  # re-exported: the request's data model lives in r2med.llm.requests
    Budget,
    BudgetExceeded,
    ChatJob,
    ChatResult,
    Messages,
    SamplingParams,
    Usage,
    canonical_request,
    finite_number,
    read_top_logprobs,
    request_key,
)
from r2med.settings import ENV_OPENAI_API_KEY

logger = logging.getLogger(__name__)

__all__ = ["Budget", "BudgetExceeded", "ChatClient", "ChatJob", "ChatResult", "Messages", "SamplingParams", "Usage",
           "canonical_request", "request_key"]

#: ``(answer, attempts, seconds) -> ChatResult``
_Reader = Callable[[dict[str, Any], int, float], ChatResult]


#: a token count at or above this (2**53, where JSON numbers stop being exact in most readers) is not a count
_MAX_COUNT = 2 ** 53


def _tokens(value: Any) -> int:
    """A token count of an answer's ``usage``: a JSON number from 0 to 2**53 (a fraction cut to its whole part);
    0 when absent or anything else (``NaN``, ``Infinity``, ``1e400``, a negative, a bool, a string). Never raises.

    >>> _tokens(12), _tokens(12.7), _tokens(float("nan")), _tokens(-3), _tokens(10 ** 400), _tokens(True)
    (12, 12, 0, 0, 0, 0)
    """
    number = finite_number(value)
    return int(value) if number is not None and 0 <= number < _MAX_COUNT else 0


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str | None) -> str | None:
    """``text`` with every lone surrogate (half of a character a model emitted as ``\\ud83d``: JSON allows it, UTF-8
    cannot hold it) replaced by U+FFFD, so the answer can be stored and read back; nothing else changes.

    >>> valid_text("half \\ud83d an emoji \\U0001f600")
    'half \ufffd an emoji 😀'
    """
    if text is None or not _LONE_SURROGATE.search(text):
        return text
    logger.warning("an answer held a lone surrogate (half a character); it is stored with U+FFFD in its place")
    return _LONE_SURROGATE.sub("\ufffd", text)


def _sorted(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` by name: the order the ``openai`` client sent them in (the bodies stay the same bytes)."""
    return dict(sorted(fields.items()))


class ChatClient:
    """Chat completions against one OpenAI-compatible endpoint and model.

    ``api_key`` defaults to the value of ``$OPENAI_API_KEY`` (or of the variable named by ``api_key_env``); a server
    on this machine or a private network may run without one. ``timeout`` bounds each attempt; ``max_retries``
    attempts follow the first, ``backoff`` seconds doubling up to ``max_backoff`` (jittered). ``usage`` is cumulative.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        budget: Budget | None = None,
        api_key_env: str | None = None,
    ) -> None:
        if not model:
            raise UsageError("an LLM model id is needed (--llm-model)")
        url = check_base_url(base_url, provider=model)
        self._secret = resolve_key(url, provider=model, key=api_key, env=api_key_env)
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.budget = budget or Budget()
        self.usage = Usage()
        self._http = JsonClient(url, label=model, secret=self._secret, timeout=timeout,
                                policy=RetryPolicy(max_retries=max_retries, base_delay=backoff, max_delay=max_backoff),
                                key_hint="" if api_key else api_key_env or ENV_OPENAI_API_KEY)

    def __repr__(self) -> str:
        return f"ChatClient({self.model!r}, {safe_url(self.base_url)!r})"

    @property
    def stats(self) -> dict[str, float]:
        """HTTP counters since construction, as the embedding encoders': requests, retries, waited_s."""
        return self._http.stats.snapshot()

    # ------------------------------------------------------------ one request
    async def complete(self, messages: Messages, params: SamplingParams, *, extra: dict[str, Any] | None = None) -> ChatResult:
        """One chat completion with retries (the connections are the running event loop's); ``extra``: request
        fields outside OpenAI's API, as for ``complete_text``."""
        payload = {"model": self.model, "messages": list(messages), **_sorted(params.to_request()), **(extra or {})}
        return await self._send("chat/completions", payload, self._result)

    async def complete_job(self, job: ChatJob) -> ChatResult:
        """``job`` sent as what it is: a text completion of its ``prompt``, else a chat completion of its messages."""
        if job.prompt is not None:
            return await self.complete_text(job.prompt, job.params, extra=job.extra)
        return await self.complete(job.messages, job.params, extra=job.extra)

    async def complete_text(self, prompt: str | list[int], params: SamplingParams, *, stop: Sequence[str] = (),
                            extra: dict[str, Any] | None = None, logprobs: int | None = None) -> ChatResult:
        """One text completion (``POST /v1/completions``) of ``prompt`` (a text, or token ids) with retries, ending at any of ``stop``;
        ``extra``: request fields outside OpenAI's API (vLLM's and llama.cpp's ``top_k``, ``repetition_penalty``).

        An empty text is a valid answer here (the model may stop at once). ``ChatResult.stop`` is the stop string
        the server says it matched (vLLM's ``stop_reason``, llama.cpp's ``stopping_word``), else ``None``.
        ``logprobs`` (OpenAI's field: how many top tokens per position) asks for log-probabilities; they come back
        in ``ChatResult.top_logprobs`` (``read_top_logprobs``), and an answer without them is retried as unusable.
        """
        fields = {**params.to_request(), **({"stop": list(stop)} if stop else {}),
                  **({"logprobs": logprobs} if logprobs is not None else {})}
        payload = {"model": self.model, "prompt": prompt, **_sorted(fields), **(extra or {})}
        read = self._text_result if logprobs is None else self._text_result_with_logprobs
        return await self._send("completions", payload, read)

    async def aclose(self) -> None:
        """Close the connections ``complete`` opened in the running event loop (``complete_many`` closes its own)."""
        await self._http.aclose()

    def _check_budget(self) -> None:
        budget, usage = self.budget, self.usage
        if budget.max_requests is not None and usage.requests >= budget.max_requests:
            raise BudgetExceeded(f"request budget of {budget.max_requests} spent ({usage.requests} requests sent)")
        used = usage.prompt_tokens + usage.completion_tokens
        if budget.max_tokens is not None and used >= budget.max_tokens:
            raise BudgetExceeded(f"token budget of {budget.max_tokens} spent ({used} tokens used)")

    def _before(self, attempt: int) -> None:
        """Before each attempt: the budget is checked (``BudgetExceeded`` sends nothing), the attempt counted."""
        self._check_budget()
        self.usage.requests += 1
        if attempt:
            self.usage.retries += 1

    async def _send(self, path: str, payload: dict[str, Any], read: _Reader) -> ChatResult:
        start = time.perf_counter()
        return await self._http.apost(path, payload, before=self._before,
                                      parse=lambda answer, attempts: read(answer, attempts, time.perf_counter() - start))

    def _choice(self, answer: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
        """The first choice of an answer and its token counts (counted in ``usage``); ``BadAnswer`` without one."""
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        prompt, completion = _tokens(usage.get("prompt_tokens")), _tokens(usage.get("completion_tokens"))
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BadAnswer(f"answer has no choices: {excerpt(json.dumps(answer, ensure_ascii=False))!r}")
        return choices[0], prompt, completion

    def _text_result(self, answer: dict[str, Any], attempts: int, seconds: float) -> ChatResult:
        choice, prompt, completion = self._choice(answer)
        text = valid_text(choice.get("text")) if isinstance(choice.get("text"), str) else choice.get("text")
        if not isinstance(text, str):
            raise BadAnswer(f"answer is not a text completion (choice without 'text', got {type(text).__name__})")
        matched = choice.get("stop_reason", choice.get("stopping_word"))
        return ChatResult(text, None, choice.get("finish_reason"), prompt, completion, attempts, seconds,
                          stop=matched if isinstance(matched, str) and matched else None)

    def _text_result_with_logprobs(self, answer: dict[str, Any], attempts: int, seconds: float) -> ChatResult:
        result = self._text_result(answer, attempts, seconds)
        tops = read_top_logprobs(answer["choices"][0].get("logprobs"))
        if tops is None:
            raise BadAnswer("the answer carries no logprobs (a server that ignores the 'logprobs' field?)")
        return dataclasses.replace(result, top_logprobs=tops)

    def _result(self, answer: dict[str, Any], attempts: int, seconds: float) -> ChatResult:
        choice, prompt, completion = self._choice(answer)
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or None
        text, reasoning = (valid_text(t) if isinstance(t, str) else t for t in (text, reasoning))
        if not isinstance(text, str) or (not text.strip() and not reasoning):
            raise BadAnswer(f"empty content (finish_reason={choice.get('finish_reason')!r})")
        return ChatResult(text, reasoning if isinstance(reasoning, str) else None, choice.get("finish_reason"),
                          prompt, completion, attempts, seconds)

    # ------------------------------------------------------------ many requests
    def complete_many(
        self,
        jobs: Sequence[ChatJob],
        *,
        concurrency: int = 8,
        on_result: Callable[[ChatJob, ChatResult | Exception], None],
        progress: bool = True,
        desc: str | None = None,
        unit: str = "request",
    ) -> Usage:
        """Run ``jobs`` with at most ``concurrency`` requests in flight; return the cumulative usage.

        ``on_result(job, result_or_error)`` is called in the calling thread as each job finishes, so
        the caller can store it at once; a job that failed gets its ``ProviderError``. When the
        budget runs out or the run must stop (server refusing connections, bad key), no new
        request is sent, the requests in flight finish and are delivered, and the error is raised
        at the end (``BudgetExceeded`` carries the number of jobs left in ``pending``). ``progress`` shows a
        bar named ``desc`` counting ``unit``s (one per job), with the retries and failures beside it.
        """
        if concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {concurrency}")
        jobs = list(jobs)
        if not jobs:
            return self.usage
        bar = progress_bar(len(jobs), desc=desc or f"chat {self.model}", unit=unit, enabled=progress)

        def deliver(job: ChatJob, outcome: ChatResult | Exception) -> None:
            on_result(job, outcome)
            bar.update(1)
            if self.usage.retries or self.usage.failures:
                bar.set_postfix(retries=self.usage.retries, failures=self.usage.failures, refresh=False)

        try:
            run_sync(lambda send: self._run_all(jobs, concurrency, send), deliver)
        finally:
            bar.close()
        return self.usage

    async def _run_all(self, jobs: list[ChatJob], concurrency: int, deliver: Callable) -> None:
        pending = iter(jobs)
        stop: list[BaseException] = []
        taken = [0]

        async def worker() -> None:
            while not stop:
                job = next(pending, None)
                if job is None:
                    return
                taken[0] += 1
                try:
                    outcome: ChatResult | Exception = await self.complete_job(job)
                except BudgetExceeded as exc:
                    taken[0] -= 1
                    stop.append(exc)
                    return
                except (MissingResourceError, FatalProviderError) as exc:
                    self.usage.failures += 1
                    stop.append(exc)
                    return
                except ProviderError as exc:
                    self.usage.failures += 1
                    logger.warning("request %s failed: %s", job.key[:12], exc)
                    outcome = exc
                try:
                    deliver(job, outcome)
                except BaseException as exc:
                    stop.append(exc)
                    raise

        try:
            results = await asyncio.gather(*(worker() for _ in range(min(concurrency, len(jobs)))), return_exceptions=True)
        finally:
            await self._http.aclose()
        for item in results:
            if isinstance(item, BaseException) and not stop:
                raise item
        if stop:
            first = stop[0]
            if isinstance(first, BudgetExceeded):
                left = len(jobs) - taken[0]
                raise BudgetExceeded(f"{first} after {taken[0]} of {len(jobs)} jobs; every finished one was kept, "
                                     f"{left} not sent (raise the budget and rerun to finish them)", pending=left)
            raise first
