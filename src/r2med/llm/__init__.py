"""LLM access: an OpenAI-compatible chat client (``client``) and its resumable response cache (``cache``).

Importing this package imports neither ``openai`` nor ``httpx``; the client loads them when it
first sends a request.
"""

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

__all__ = [
    "Budget", "BudgetExceeded", "ChatClient", "ChatJob", "ChatResult", "ResponseCache", "SamplingParams", "Usage",
    "canonical_request", "request_key",
]
