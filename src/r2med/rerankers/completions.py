"""Pointwise LLM scoring over an OpenAI-compatible ``/v1/completions`` server, with log-probabilities.

The reasoning rerankers (Rank1, Qwen3-Reranker through a server) send one text prompt per (query, document) pair
and read the top log-probabilities of the last generated position. :class:`CompletionRequests` sends a batch
of such requests with at most ``concurrency`` in flight and appends each response to a ``ResponseCache`` under its
request key (model, prompt, sampling, stop strings, logprobs, extra fields) the moment it arrives, before it is
used: a run killed midway sends none of its finished requests again. The score cache of ``PointwiseReranker`` sits
on top, so a pair scored once is not even looked up here again. ``fetch_chains`` sends a request and, when its answer
calls for one, a follow-up whose prompt extends it (Rank1's forced answer) back to back in the same one of the
``concurrency`` slots, so that the server's slot still holds the shared prompt and evaluates only what was added.

The package data ``r2med/data/pointwise_llm_prompts.json`` holds the authors' prompt texts with their file:line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from r2med.errors import UsageError
from r2med.io.aio import run_sync
from r2med.llm.cache import ResponseCache
from r2med.llm.client import ChatClient, ChatResult, SamplingParams, request_key
from r2med.llm.requests import finite_number
from r2med.packaged import read_text

logger = logging.getLogger(__name__)


@cache
def prompt_data() -> dict[str, Any]:
    """The packaged prompt texts of the pointwise LLM rerankers (``pointwise_llm_prompts.json``)."""
    text = read_text("pointwise_llm_prompts.json")
    return json.loads(text)


def fact(reranker: str, name: str) -> Any:
    """One quoted fact (``text``) of ``reranker`` in the package data.

    >>> fact("rank1", "stop")
    ['</think> true', '</think> false']
    """
    return prompt_data()[reranker][name]["text"]


def two_way(top: Mapping[str, float], first: str, second: str, *, missing: float | None = None) -> float | None:
    """``exp(a) / (exp(a) + exp(b))`` for the log-probabilities ``a``, ``b`` of tokens ``first`` and ``second`` in
    ``top``; a token not there, or whose value is not a finite number, counts as ``missing`` (None: no score then).
    Computed as a logistic of ``a - b``.

    >>> round(two_way({" true": math.log(0.6), " false": math.log(0.2)}, " true", " false"), 6)
    0.75
    >>> two_way({" true": -0.1}, " true", " false") is None, round(two_way({"yes": -10.0}, "yes", "no", missing=-10), 2)
    (True, 0.5)
    """
    a, b = _logprob(top, first, missing), _logprob(top, second, missing)
    if a is None or b is None:
        return None
    diff = b - a
    return 1.0 / (1.0 + math.exp(diff)) if diff < 700 else 0.0


def _logprob(top: Any, token: str, missing: float | None) -> float | None:
    """``top[token]`` when it is a finite number, else ``missing`` (the rule of ``read_top_logprobs``): a response
    cache line edited by hand, or a ``top`` that is not a mapping, never raises here."""
    number = finite_number(top.get(token)) if isinstance(top, Mapping) else None
    return missing if number is None else number


@dataclass(frozen=True)
class TextRequest:
    """One ``/v1/completions`` request: the prompt (a text, or a tuple of token ids: the model's input exactly, as
    vLLM's and llama.cpp's completions take it), its sampling, stop strings, top logprobs and extra fields."""

    prompt: str | tuple[int, ...]
    params: SamplingParams
    stop: tuple[str, ...] = ()
    logprobs: int = 20
    extra: Mapping[str, Any] = field(default_factory=dict)

    def key(self, model: str, task: str) -> str:
        """The response-cache key: everything the response depends on (not the server's address).

        >>> p = SamplingParams(temperature=0.0)
        >>> TextRequest("1 2", p).key("m", "t") == TextRequest((1, 2), p).key("m", "t")
        False
        """
        if isinstance(self.prompt, str):
            message = {"role": "completion", "content": self.prompt}
        else:
            message = {"role": "completion-token-ids", "content": " ".join(str(int(i)) for i in self.prompt)}
        return request_key(model, [message], self.params,
                           extra={"task": task, "stop": list(self.stop), "logprobs": self.logprobs, **self.extra})

    def payload_prompt(self) -> str | list[int]:
        """The ``prompt`` field sent: the text, or the token ids as a list."""
        return self.prompt if isinstance(self.prompt, str) else list(self.prompt)


#: a chain's rule: the follow-up request its request's record calls for (Rank1's forced answer), or None
Follow = Callable[[TextRequest, Mapping[str, Any]], "TextRequest | None"]


def record_of(result: ChatResult) -> dict[str, Any]:
    """What is kept of a response: its text, how it ended, its tokens and the top logprobs of its last position."""
    tops = result.top_logprobs or ()
    return {"text": result.text, "finish_reason": result.finish_reason, "stop": result.stop,
            "last_top_logprobs": dict(tops[-1]) if tops else None, "positions": len(tops),
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "attempts": result.attempts, "seconds": round(result.seconds, 3)}


class CompletionRequests:
    """Sends text completions through ``client``, each answered from ``cache`` when it holds it.

    ``requests_sent``/``cached`` count this object's requests (the client's ``usage`` counts attempts and tokens);
    ``lookup`` finds the record of a request already answered (this run's, or the cache's) without sending it.
    """

    def __init__(self, client: ChatClient, *, task: str, cache: ResponseCache | None = None, concurrency: int = 8) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {concurrency}")
        self.client = client
        self.task = task
        self.cache = cache
        self.concurrency = concurrency
        self.requests_sent = 0
        self.cached = 0
        self._seen: dict[str, dict[str, Any]] = {}

    def sent(self) -> tuple[int, int, int]:
        """The client's cumulative ``(HTTP requests, prompt tokens, completion tokens)``: what was sent so far."""
        usage = self.client.usage
        return usage.requests, usage.prompt_tokens, usage.completion_tokens

    def lookup(self, request: TextRequest) -> dict[str, Any] | None:
        """The record of ``request`` if this object fetched it or the cache holds it; None otherwise (sends nothing)."""
        key = request.key(self.client.model, self.task)
        seen = self._seen.get(key)
        if seen is None and self.cache is not None:
            seen = self.cache.get(key)
        return seen

    def fetch(self, requests: Sequence[TextRequest]) -> list[dict[str, Any]]:
        """The record (``record_of``) of each request, in order: from the cache, else requested and stored at once."""
        keys = [request.key(self.client.model, self.task) for request in requests]
        out: dict[str, dict[str, Any]] = {}
        todo: dict[str, TextRequest] = {}
        for key, request in zip(keys, requests):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                out[key] = hit
                self.cached += 1
            else:
                todo.setdefault(key, request)
        if todo and self.cache is not None:  # before the first request: a cache another run is writing refuses it
            self.cache.open_for_append()
        if todo:
            try:
                run_sync(lambda send: self._send_all(todo, send), lambda key, record: self._store(key, record, out))
            finally:
                if self.cache is not None:  # its lock given back: the next run with this LLM may write it
                    self.cache.close()
        self._seen.update(out)
        return [out[key] for key in keys]

    def fetch_chains(self, requests: Sequence[TextRequest],
                     follow: Follow) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Per request, in order, its record and, when ``follow(request, record)`` names a follow-up request, the
        follow-up's record (else None); ``follow`` must depend on nothing else. Each record comes from the cache, else
        is requested and stored at once, as ``fetch`` does (same keys). A request that is sent and its follow-up go
        back to back in one of the ``concurrency`` slots; a follow-up whose request was cached goes on its own."""
        model, task = self.client.model, self.task
        firsts = [(request.key(model, task), request) for request in requests]
        found: dict[str, dict[str, Any]] = {}  # what the cache held
        jobs: dict[str, tuple[TextRequest, bool]] = {}  # key -> (request, whether its follow-up may come after it)
        for key, request in firsts:
            hit = self._hit(key, found)
            if hit is None:
                jobs.setdefault(key, (request, True))
                continue
            then = follow(request, hit)
            if then is not None and self._hit(then.key(model, task), found) is None:
                jobs.setdefault(then.key(model, task), (then, False))
        out: dict[str, dict[str, Any]] = {}
        if jobs and self.cache is not None:  # before the first request: a cache another run is writing refuses it
            self.cache.open_for_append()
        if jobs:
            try:
                run_sync(lambda send: self._send_chains(jobs, follow, send),
                         lambda key, record: self._store(key, record, out))
            finally:
                if self.cache is not None:  # its lock given back: the next run with this LLM may write it
                    self.cache.close()
        out.update(found)
        results: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for key, request in firsts:
            then = follow(request, out[key])
            then_key = None if then is None else then.key(model, task)
            if then_key is not None and then_key not in out:  # a follow-up the cache held (looked up, not sent)
                hit = self._hit(then_key, found)
                assert hit is not None, then_key  # the chain sent every follow-up the cache did not hold
                out[then_key] = hit
            results.append((out[key], None if then_key is None else out[then_key]))
        self._seen.update(out)
        return results

    def _hit(self, key: str, found: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """The cache's record of ``key`` (kept in ``found`` and counted), or None."""
        hit = found.get(key)
        if hit is None and self.cache is not None:
            hit = self.cache.get(key)
        if hit is not None:
            found[key] = hit
            self.cached += 1
        return hit

    async def _send_chains(self, jobs: dict[str, tuple[TextRequest, bool]], follow: Follow, send: Any) -> None:
        gate = asyncio.Semaphore(self.concurrency)
        model, task = self.client.model, self.task
        claimed = set(jobs)  # keys sent, or to be sent, by some chain

        async def request_one(key: str, request: TextRequest) -> dict[str, Any]:
            result = await self.client.complete_text(request.payload_prompt(), request.params, stop=request.stop,
                                                     extra=dict(request.extra), logprobs=request.logprobs)
            record = record_of(result)
            send(key, record)
            return record

        async def chain(key: str, request: TextRequest, chained: bool) -> None:
            async with gate:
                record = await request_one(key, request)
                then = follow(request, record) if chained else None
                if then is None:
                    return
                then_key = then.key(model, task)
                # another chain sends it, or the cache holds it (read back once all are done): not sent
                if then_key in claimed or (self.cache is not None and then_key in self.cache):
                    return
                claimed.add(then_key)
                await request_one(then_key, then)

        await self._run_batch([chain(key, request, chained) for key, (request, chained) in jobs.items()])

    def _store(self, key: str, record: dict[str, Any], out: dict[str, dict[str, Any]]) -> None:
        if self.cache is not None:
            self.cache.append(key, record)
        out[key] = record
        self.requests_sent += 1

    async def _send_all(self, todo: dict[str, TextRequest], send: Any) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(key: str, request: TextRequest) -> None:
            async with gate:
                result = await self.client.complete_text(request.payload_prompt(), request.params, stop=request.stop,
                                                         extra=dict(request.extra), logprobs=request.logprobs)
            send(key, record_of(result))

        await self._run_batch([one(key, request) for key, request in todo.items()])

    async def _run_batch(self, jobs: list[Any]) -> None:
        """Run the coroutines ``jobs`` together; the first failure stops the batch (what finished is stored, the rest
        is sent by the rerun), and the client is closed either way."""
        tasks = [asyncio.ensure_future(job) for job in jobs]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.client.aclose()


def tokens_of(records: Sequence[Mapping[str, Any] | None]) -> tuple[int, int] | None:
    """The ``(prompt, completion)`` tokens the records say they used; None when one of them is missing.

    >>> tokens_of([{"prompt_tokens": 30, "completion_tokens": 8}, {"prompt_tokens": 40, "completion_tokens": 1}])
    (70, 9)
    >>> tokens_of([{"prompt_tokens": 30, "completion_tokens": 8}, None]) is None
    True
    """
    if any(record is None for record in records):
        return None
    return (sum(int(r.get("prompt_tokens") or 0) for r in records if r is not None),
            sum(int(r.get("completion_tokens") or 0) for r in records if r is not None))
