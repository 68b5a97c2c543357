"""An OpenAI-compatible chat client: bounded concurrency, counted retries with backoff, a budget.

Works against any server that speaks ``POST /v1/chat/completions`` (OpenAI, vLLM, Ollama, the
llama.cpp server, a proxy). The ``openai`` package's ``AsyncOpenAI`` sends the requests, with its own
retries turned off: this module retries by itself so that every attempt is counted. What is retried
(exponential backoff with jitter, or exactly the wait the server asks for): HTTP 408, 409, 429 and
5xx, timeouts, dropped connections and answers without a usable choice (not JSON, no ``choices``,
empty content). What fails one job at once: any other 4xx. What stops the whole run (after the
requests in flight finish): a server that refuses connections on every attempt
(``MissingResourceError``, exit 4), a rejected key, an unknown model or a used-up quota.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from r2med.errors import MissingExtraError, MissingResourceError, ProviderError, UsageError
from r2med.http import (
    Secret,
    backoff_delay,
    error_message,
    is_local_url,
    parse_retry_after,
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
    request_key,
)
from r2med.settings import ENV_OPENAI_API_KEY, get_secret

logger = logging.getLogger(__name__)

__all__ = ["Budget", "BudgetExceeded", "ChatClient", "ChatJob", "ChatResult", "Messages", "SamplingParams", "Usage",
           "canonical_request", "request_key"]

class _FatalError(ProviderError):
    """A failure no other job can escape (bad key, unknown model, no quota): the run stops."""

    fatal = True


class _BadResponse(Exception):
    """A 2xx answer without a usable choice; retried."""


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


class ChatClient:
    """Chat completions against one OpenAI-compatible endpoint and model.

    ``api_key`` defaults to ``$OPENAI_API_KEY``, and to ``"EMPTY"`` for a server on this machine or
    a private network. ``timeout`` bounds each attempt; ``max_retries`` attempts follow the first,
    ``backoff`` seconds doubling up to ``max_backoff`` (jittered). ``usage`` is cumulative.
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
    ) -> None:
        if not model:
            raise UsageError("an LLM model id is needed (--llm-model)")
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise UsageError(f"base URL {base_url!r} is not an http(s) URL; e.g. http://localhost:8000/v1")
        key = api_key or get_secret(ENV_OPENAI_API_KEY) or ("EMPTY" if is_local_url(base_url) else None)
        if key is None:
            raise UsageError(
                f"no API key for {safe_url(base_url)}: set ${ENV_OPENAI_API_KEY} (or name another variable with --api-key-env)"
            )
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.budget = budget or Budget()
        self.usage = Usage()
        self._secret = Secret(key)
        self._rng = random.Random()
        self._loop_client: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"ChatClient({self.model!r}, {safe_url(self.base_url)!r})"

    # ------------------------------------------------------------ one request
    def _new_async_client(self) -> Any:
        try:
            from openai import AsyncOpenAI
        except ImportError:
            raise MissingExtraError("openai", "llm", "chat completions") from None
        return AsyncOpenAI(base_url=self.base_url, api_key=self._secret.reveal(), timeout=self.timeout, max_retries=0)

    def _client_for_loop(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop_client is None or self._loop_client[0] is not loop:
            self._loop_client = (loop, self._new_async_client())
        return self._loop_client[1]

    async def complete(self, messages: Messages, params: SamplingParams) -> ChatResult:
        """One chat completion with retries (the client is made once per event loop)."""
        return await self._complete(self._client_for_loop(), messages, params)

    async def complete_text(self, prompt: str, params: SamplingParams, *, stop: Sequence[str] = (),
                            extra: dict[str, Any] | None = None) -> ChatResult:
        """One text completion (``POST /v1/completions``) of ``prompt`` with retries, ending at any of ``stop``;
        ``extra``: request fields outside OpenAI's API (vLLM's and llama.cpp's ``top_k``, ``repetition_penalty``).

        An empty text is a valid answer here (the model may stop at once). ``ChatResult.stop`` is the stop string
        the server says it matched (vLLM's ``stop_reason``, llama.cpp's ``stopping_word``), else ``None``.
        """
        client = self._client_for_loop()

        def send() -> Any:
            request = params.to_request()
            if stop:
                request["stop"] = list(stop)
            if extra:
                request["extra_body"] = dict(extra)
            return client.completions.create(model=self.model, prompt=prompt, **request)

        return await self._attempts(send, self._text_result)

    async def aclose(self) -> None:
        """Close the connections ``complete`` opened (``complete_many`` closes its own)."""
        if self._loop_client is not None:
            client, self._loop_client = self._loop_client[1], None
            await client.close()

    def _check_budget(self) -> None:
        budget, usage = self.budget, self.usage
        if budget.max_requests is not None and usage.requests >= budget.max_requests:
            raise BudgetExceeded(f"request budget of {budget.max_requests} spent ({usage.requests} requests sent)")
        used = usage.prompt_tokens + usage.completion_tokens
        if budget.max_tokens is not None and used >= budget.max_tokens:
            raise BudgetExceeded(f"token budget of {budget.max_tokens} spent ({used} tokens used)")

    async def _complete(self, client: Any, messages: Messages, params: SamplingParams) -> ChatResult:
        def send() -> Any:
            return client.chat.completions.create(model=self.model, messages=list(messages), **params.to_request())

        return await self._attempts(send, self._result)

    async def _attempts(self, send: Callable[[], Any], parse: Callable[[Any, int, float], ChatResult]) -> ChatResult:
        start = time.perf_counter()
        where = f"{safe_url(self.base_url)} ({self.model})"
        for attempt in range(self.max_retries + 1):
            self._check_budget()
            self.usage.requests += 1
            if attempt:
                self.usage.retries += 1
            try:
                response = await send()
                return parse(response, attempt + 1, time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is re-raised
                reason, retry_after = self._classify(exc, where, attempt)
            if attempt == self.max_retries:
                raise ProviderError(f"{where}: still failing after {attempt + 1} attempts; last error: {reason}")
            delay = min(self.max_backoff, retry_after if retry_after is not None
                        else backoff_delay(attempt, base=self.backoff, cap=self.max_backoff, rng=self._rng))
            logger.info("%s: %s; retry %d/%d in %.2f s", where, reason, attempt + 1, self.max_retries, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _classify(self, exc: Exception, where: str, attempt: int) -> tuple[str, float | None]:
        """``(reason, retry_after)`` for a retryable failure; raises for the others."""
        import openai

        if isinstance(exc, _BadResponse):
            return str(exc), None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            body = exc.response.content if exc.response is not None else b""
            message = self._secret.redact(error_message(body or str(exc)))
            if status in (401, 403):
                raise _FatalError(f"{where}: HTTP {status}: {message} (check the API key)") from None
            if status == 404:
                raise _FatalError(f"{where}: HTTP 404: {message} (is the model id and base URL right?)") from None
            if status == 429 and b"insufficient_quota" in body:
                raise _FatalError(f"{where}: HTTP 429: {message} (quota used up)") from None
            if status < 500 and status not in (408, 409, 429):
                raise ProviderError(f"{where}: HTTP {status}: {message}") from None
            return f"HTTP {status}: {message}", parse_retry_after(exc.response.headers) if exc.response is not None else None
        if isinstance(exc, openai.APITimeoutError):
            return f"timed out after {self.timeout:g} s", None
        if isinstance(exc, openai.APIConnectionError):
            refused = any(isinstance(e, ConnectionRefusedError) or type(e).__name__ == "ConnectError" for e in _chain(exc))
            if refused and attempt == self.max_retries:
                raise MissingResourceError(
                    f"cannot connect to {safe_url(self.base_url)}: connection refused on {attempt + 1} attempts. "
                    "Start an OpenAI-compatible server first, e.g. `vllm serve MODEL --port 8000` or "
                    "`llama-server -m MODEL.gguf --port 8080`, and pass its address as --base-url http://HOST:PORT/v1"
                ) from None
            return ("connection refused" if refused else f"connection failed ({type(exc).__name__})"), None
        if isinstance(exc, (openai.APIResponseValidationError, ValueError)):
            return f"answer is not a chat completion ({type(exc).__name__})", None
        raise exc

    def _count(self, response: Any) -> tuple[int, int]:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        return prompt, completion

    def _choice(self, response: Any) -> tuple[Any, int, int]:
        """The first choice of an answer and its token counts (counted in ``usage``); _BadResponse without one."""
        prompt, completion = self._count(response)
        choices = getattr(response, "choices", None)
        if not choices:
            shown = response[:80] if isinstance(response, str) else type(response).__name__
            raise _BadResponse(f"answer has no choices ({shown!r})")
        return choices[0], prompt, completion

    def _text_result(self, response: Any, attempts: int, seconds: float) -> ChatResult:
        choice, prompt, completion = self._choice(response)
        text = getattr(choice, "text", None)
        if not isinstance(text, str):
            raise _BadResponse(f"answer is not a text completion (choice without 'text', got {type(text).__name__})")
        extra = getattr(choice, "model_extra", None) or {}
        matched = extra.get("stop_reason", extra.get("stopping_word"))
        return ChatResult(text, None, getattr(choice, "finish_reason", None), prompt, completion, attempts, seconds,
                          stop=matched if isinstance(matched, str) and matched else None)

    def _result(self, response: Any, attempts: int, seconds: float) -> ChatResult:
        choice, prompt, completion = self._choice(response)
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None) or None
        if not isinstance(text, str) or (not text.strip() and not reasoning):
            raise _BadResponse(f"empty content (finish_reason={getattr(choice, 'finish_reason', None)!r})")
        return ChatResult(text, reasoning if isinstance(reasoning, str) else None,
                          getattr(choice, "finish_reason", None), prompt, completion, attempts, seconds)

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
        client = self._new_async_client()
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
                    outcome: ChatResult | Exception = await self._complete(client, job.messages, job.params)
                except BudgetExceeded as exc:
                    taken[0] -= 1
                    stop.append(exc)
                    return
                except (MissingResourceError, _FatalError) as exc:
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
            await client.close()
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
