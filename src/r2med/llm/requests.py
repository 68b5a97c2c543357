"""The data of an LLM request: its sampling, the result, usage and budget, a job, and its content key.

``request_key`` names a request by everything that determines its response (model, messages or prompt,
sampling, extra fields): the key of every response cache. ``r2med.llm.client`` sends the requests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from r2med.errors import ProviderError

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters of a chat request; ``None`` leaves the server's default.

    >>> SamplingParams(temperature=0.7, max_tokens=10240, seed=42).to_request()
    {'temperature': 0.7, 'max_tokens': 10240, 'seed': 42}
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    def to_request(self) -> dict:
        """The non-``None`` fields, as the sampling fields of a chat or text completion request."""
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class ChatResult:
    """One finished generation. ``reasoning`` is the server's ``reasoning_content``/``reasoning`` field."""

    text: str
    reasoning: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    seconds: float
    stop: str | None = None
    #: per generated position, the top tokens and their log-probabilities (only when they were asked for)
    top_logprobs: tuple[dict[str, float], ...] | None = None


def read_top_logprobs(logprobs: Any) -> tuple[dict[str, float], ...] | None:
    """The top log-probabilities per generated position of a text completion's ``logprobs``, in either form servers
    send: OpenAI's completions form (vLLM: ``{"top_logprobs": [{token: logprob}, ...]}``) or the chat form
    (llama.cpp: ``{"content": [{"top_logprobs": [{"token": t, "logprob": x}, ...]}, ...]}``). A token listed twice
    (two ids that read alike) keeps its higher log-probability; entries that are not a token and a finite number
    are left out. ``None`` when the answer carries none.

    >>> read_top_logprobs({"tokens": [" true"], "top_logprobs": [{" true": -0.1, " false": -2.4}]})
    ({' true': -0.1, ' false': -2.4},)
    >>> read_top_logprobs({"content": [{"token": "yes", "logprob": -0.2,
    ...                   "top_logprobs": [{"token": "yes", "logprob": -0.2}, {"token": "no", "logprob": -1.7}]}]})
    ({'yes': -0.2, 'no': -1.7},)
    >>> read_top_logprobs(None) is None, read_top_logprobs({"top_logprobs": [None]})
    (True, ({},))
    """
    import math

    if not isinstance(logprobs, dict):
        return None
    if isinstance(logprobs.get("top_logprobs"), list):
        rows = [list(row.items()) if isinstance(row, dict) else [] for row in logprobs["top_logprobs"]]
    elif isinstance(logprobs.get("content"), list):
        rows = []
        for item in logprobs["content"]:
            tops = item.get("top_logprobs") if isinstance(item, dict) else None
            rows.append([(t.get("token"), t.get("logprob")) for t in tops if isinstance(t, dict)]
                        if isinstance(tops, list) else [])
    else:
        return None
    out = []
    for row in rows:
        position: dict[str, float] = {}
        for token, value in row:
            number = finite_number(value)
            if isinstance(token, str) and number is not None:
                position[token] = max(number, position.get(token, -math.inf))
        out.append(position)
    return tuple(out)


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is an int or float (not a bool) of finite value, else None; never raises (an int
    beyond float's range, as JSON may carry one, is None).

    >>> finite_number(-0.5), finite_number(3), finite_number(10**400), finite_number(float("nan")), finite_number("1")
    (-0.5, 3.0, None, None, None)
    """
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


@dataclass
class Usage:
    """Cumulative counts: HTTP requests sent (retries included), retries, failed jobs and tokens."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        """
        >>> Usage(requests=3, retries=1).as_dict()["retries"]
        1
        """
        return asdict(self)


@dataclass(frozen=True)
class Budget:
    """Limits for one client: HTTP requests sent, and prompt + completion tokens used."""

    max_requests: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class ChatJob:
    """A request to make; ``key`` names it for the caller (usually ``request_key``).

    With ``prompt`` it is a text completion of that prompt (``POST /v1/completions``; ``messages`` is then only what
    the caller keys it by); ``extra``: request fields outside OpenAI's API (vLLM's and llama.cpp's ``top_k``,
    ``min_p``, ``repetition_penalty``), sent as they are.
    """

    key: str
    messages: list[dict[str, str]]
    params: SamplingParams
    prompt: str | None = None
    extra: dict[str, Any] | None = None


class BudgetExceeded(ProviderError):
    """The budget ran out: no new request was sent; everything finished was delivered (exit 6)."""

    def __init__(self, message: str, *, pending: int = 0) -> None:
        super().__init__(message)
        self.pending = pending
        self.report: Any = None  # filled by callers that write partial output (generate_expansions)


def canonical_request(model: str, messages: Messages, params: SamplingParams, *, extra: dict | None = None) -> str:
    """The canonical JSON of everything that determines a response (sorted keys, no spaces).

    >>> canonical_request("m", [{"role": "user", "content": "hi"}], SamplingParams(seed=1))
    '{"extra":{},"messages":[{"content":"hi","role":"user"}],"model":"m","params":{"seed":1}}'
    """
    payload = {"model": model, "messages": [dict(m) for m in messages], "params": params.to_request(), "extra": extra or {}}
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_key(model: str, messages: Messages, params: SamplingParams, *, extra: dict | None = None) -> str:
    """sha256 hex of ``canonical_request``: equal requests share a key, any change makes a new one.

    >>> msgs = [{"role": "user", "content": "hi"}]
    >>> a = request_key("m", msgs, SamplingParams(seed=1))
    >>> len(a), a == request_key("m", list(msgs), SamplingParams(seed=1)), a == request_key("m", msgs, SamplingParams(seed=2))
    (64, True, False)
    """
    return hashlib.sha256(canonical_request(model, messages, params, extra=extra).encode("utf-8")).hexdigest()
