"""``download(url)``: the bytes of a file at an http(s) URL (a published run file), with r2med's one retry policy.

The same rules as every other request r2med sends (``r2med.http.retry``): 408, 409, 429 and 5xx, timeouts and
dropped connections are retried after a backoff or the server's ``Retry-After``; a 404 is a missing resource (exit
4); another 4xx fails at once; a server that cannot be reached is a missing resource after the last attempt. URLs
are shown without credentials; local addresses are reached without a proxy. ``httpx2`` is imported on the first call.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from r2med.errors import MissingResourceError, ProviderError, UsageError
from r2med.http.retry import RETRY_STATUSES, Retry, RetryPolicy, error_message, parse_retry_after
from r2med.http.rules import is_local_url, safe_url

logger = logging.getLogger(__name__)

#: the largest file accepted (a run file of 100 documents per query is about 1 MB)
MAX_BYTES = 512 * 1024 * 1024


def download(url: str, *, timeout: float = 60.0, policy: RetryPolicy | None = None, max_bytes: int = MAX_BYTES,
             sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> bytes:
    """The body of ``GET url`` (redirects followed); errors as the module docstring says."""
    import httpx2

    if not url.lower().startswith(("http://", "https://")):
        raise UsageError(f"{url!r} is not an http(s) URL")
    policy, rng, shown = policy or RetryPolicy(), rng or random.Random(), safe_url(url)
    where = f"GET {shown}"
    with httpx2.Client(timeout=httpx2.Timeout(timeout), trust_env=not is_local_url(url), follow_redirects=True) as client:
        for attempt in range(policy.max_retries + 1):
            try:
                response = client.get(url, headers={"User-Agent": "r2med"})
            except httpx2.TimeoutException:
                retry = Retry(f"timed out after {timeout:g} s")
            except (httpx2.TransportError, OSError) as exc:
                retry = Retry(f"cannot connect ({type(exc).__name__}: {exc})", unreachable=True)
            else:
                status = response.status_code
                if 200 <= status < 300:
                    body = response.content
                    if len(body) > max_bytes:
                        raise ProviderError(f"{where}: {len(body)} bytes, more than the {max_bytes} accepted")
                    return body
                message = error_message(response.content.decode("utf-8", "replace"))
                if status == 404:
                    raise MissingResourceError(f"{where}: no file there (HTTP 404); check the URL")
                if status < 500 and status not in RETRY_STATUSES:
                    raise ProviderError(f"{where} failed with HTTP {status}: {message}")
                retry = Retry(f"HTTP {status}: {message}", parse_retry_after(response.headers))
            if attempt == policy.max_retries:
                if retry.unreachable:
                    raise MissingResourceError(f"cannot reach {shown}: {retry.reason} on {attempt + 1} attempts; "
                                               "check the address and the network, or download the file and pass "
                                               "its path instead")
                raise ProviderError(f"{where} still failing after {attempt + 1} attempts; last error: {retry.reason}")
            delay = policy.delay(attempt, retry, where=where, rng=rng)
            logger.info("%s: %s, retry %d/%d in %.2f s", where, retry.reason, attempt + 1, policy.max_retries, delay)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
