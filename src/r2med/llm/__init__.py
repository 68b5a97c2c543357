"""LLM access: an OpenAI-compatible chat client (``client``), the data of its requests and their keys
(``requests``), its resumable response cache (``cache``) and the parsers of reasoning models' outputs (``reasoning``).

Importing this package imports nothing but itself: the names below load their module on first use, so that
``r2med.llm.reasoning`` (pure string parsing) does not pull in the client; the client loads ``httpx2`` (through
``r2med.http``) only when it first sends a request.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from r2med.llm.cache import ResponseCache
    from r2med.llm.client import (
        Budget,
        BudgetExceeded,
        ChatClient,
        ChatJob,
        ChatResult,
        SamplingParams,
        Usage,
        canonical_request,
        request_key,
    )

_HOME = {
    "ResponseCache": "r2med.llm.cache",
    "ChatClient": "r2med.llm.client",
    **{name: "r2med.llm.requests" for name in ("Budget", "BudgetExceeded", "ChatJob", "ChatResult", "SamplingParams",
                                               "Usage", "canonical_request", "request_key")},
}

__all__ = [
    "Budget", "BudgetExceeded", "ChatClient", "ChatJob", "ChatResult", "ResponseCache", "SamplingParams", "Usage",
    "canonical_request", "request_key",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
