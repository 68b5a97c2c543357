"""The shared HTTP service of r2med: one client stack for embeddings, chat and completions.

``JsonClient`` (``client``) sends every request r2med makes to an API (``httpx2``, from threads or asyncio);
``retry`` holds the one retry policy and error classification, ``rules`` the one URL rule, the one API-key rule
and ``Secret``, the one redaction of keys. See each module for the behaviour.
"""

from __future__ import annotations

from r2med.http.client import JsonClient
from r2med.http.retry import (
    RETRY_STATUSES,
    BadAnswer,
    Counters,
    FatalProviderError,
    Retry,
    RetryPolicy,
    backoff_delay,
    error_message,
    excerpt,
    parse_retry_after,
)
from r2med.http.rules import Secret, check_base_url, is_local_url, resolve_key, safe_url, url_host

__all__ = ["RETRY_STATUSES", "BadAnswer", "Counters", "FatalProviderError", "JsonClient", "Retry", "RetryPolicy",
           "Secret", "backoff_delay", "check_base_url", "error_message", "excerpt", "is_local_url", "parse_retry_after",
           "resolve_key", "safe_url", "url_host"]
