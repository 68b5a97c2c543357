"""The context budget: how many tokens one request to the LLM server may take, prompt and completion together.

A server refuses a request that does not fit its context (vLLM: HTTP 400 when the prompt's tokens + ``max_tokens``
pass ``max_model_len``; llama.cpp: HTTP 400 ``exceed_context_size_error`` when the prompt alone fills its slot,
and a completion cut at the slot's end). The agent loop (``r2med.agent.loop``) never sends such a request: it
learns the context (``context_window``), counts each prompt's tokens (``r2med.agent.tokens.prompt_counter``), sends
``max_tokens`` clamped to what is left, and ends a query whose prompt leaves no room with stop reason
``context-full`` (its output kept). The context comes from ``--context-length`` when given, else from the server:

- vLLM: ``GET /v1/models``, the entry of the model (``id``), its ``max_model_len``;
- llama.cpp: ``GET /props``, ``default_generation_settings.n_ctx``: the context of one slot, which is the server's
  ``n_ctx`` divided by its parallel slots (``total_slots``; llama.cpp's ``--parallel``), since each request runs in
  one slot (a unified KV cache, ``--kv-unified``, gives each slot the whole ``n_ctx``, and ``/props`` says so);
- else none: the budget is off, and a server's context-overflow refusal (``is_context_error``) still ends the
  query ``context-full`` instead of failing it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from r2med.errors import MissingResourceError, ProviderError

if TYPE_CHECKING:
    from r2med.http import Secret

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContextWindow:
    """``length`` tokens per request (prompt + completion), and where that figure comes from."""

    length: int
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"length": self.length, "source": self.source}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def from_models(answer: dict[str, Any], model: str) -> int | None:
    """vLLM's ``max_model_len`` for ``model`` in a ``/v1/models`` answer (the only entry when none is named so).

    >>> from_models({"data": [{"id": "m", "max_model_len": 4096}]}, "m"), from_models({"data": [{"id": "x"}]}, "m")
    (4096, None)
    """
    data = answer.get("data")
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    named = [e for e in entries if e.get("id") == model] or (entries if len(entries) == 1 else [])
    return _count(named[0].get("max_model_len")) if named else None


def from_props(answer: dict[str, Any]) -> tuple[int, int | None] | None:
    """llama.cpp's per-slot context and its slot count in a ``/props`` answer.

    >>> from_props({"default_generation_settings": {"n_ctx": 256}, "total_slots": 4})
    (256, 4)
    """
    settings = answer.get("default_generation_settings")
    n_ctx = _count(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return (n_ctx, _count(answer.get("total_slots"))) if n_ctx else None


#: a server's refusal of a request past its context (vLLM, llama.cpp, SGLang, OpenAI): the query is full, not failed
CONTEXT_ERRORS = re.compile(r"maximum context length|exceed_context_size_error|exceeds the available context size|"
                            r"context_length_exceeded|longer than the model's context length", re.IGNORECASE)


def is_context_error(exc: BaseException) -> bool:
    """Whether a failed request was refused for its length (an HTTP 400 of ``CONTEXT_ERRORS``).

    >>> is_context_error(ProviderError("m: POST u failed with HTTP 400: This model's maximum context length is 4096 "
    ...                                "tokens. However, you requested 4600 tokens"))
    True
    """
    return isinstance(exc, ProviderError) and "HTTP 400" in str(exc) and bool(CONTEXT_ERRORS.search(str(exc)))


def context_window(base_url: str, model: str, *, given: int | None = None, secret: Secret | None = None,
                   timeout: float = 60.0) -> ContextWindow | None:
    """The context of one request to ``model`` at ``base_url``: ``given`` (``--context-length``), else vLLM's or
    llama.cpp's figure, else None. One attempt per path (a description, not the work): a server that does not
    answer leaves the budget off, with a warning, and its completions get their retries and errors as always.
    ``secret``: the key of the completions (``AgentConfig.secret``), which a server that checks keys wants here too."""
    if given is not None:
        return ContextWindow(given, "--context-length")
    from r2med.agent.tokens import server_root
    from r2med.http import JsonClient, RetryPolicy, Secret
    from r2med.http.rules import safe_url

    http = JsonClient(server_root(base_url), label=f"{model} (context length)", secret=secret or Secret(None),
                      timeout=timeout,
                      policy=RetryPolicy(max_retries=0))

    def ask(path: str) -> dict[str, Any] | None:
        try:
            return http.get(path)
        except (ProviderError, MissingResourceError) as exc:
            # 404, 405, 501: this server does not say; unreachable: its completions will say so (one error line)
            quiet = isinstance(exc, MissingResourceError) or re.search(r"HTTP (404|405|501)\b", str(exc))
            (logger.debug if quiet else logger.warning)(
                "%s%s: %s; the context budget is off unless the server's context is known otherwise (pass "
                "--context-length)", root, path, exc)
            return None

    root = safe_url(http.base_url)  # what messages and the summary show: no user:password@
    try:
        models = ask("/v1/models")
        length = from_models(models, model) if models else None
        if length is not None:
            return ContextWindow(length, f"vLLM's /v1/models max_model_len ({root})")
        props = ask("/props")
        slot = from_props(props) if props else None
        if slot is not None:
            n_ctx, slots = slot
            return ContextWindow(n_ctx, f"llama.cpp's /props ({root}): {n_ctx} tokens per slot"
                                        + (f", {slots} slots" if slots else ""))
    finally:
        http.close()
    return None
