"""``download(url)``: the bytes of a file at an http(s) URL (a published run file), through r2med's one HTTP stack.

The GET runs on ``JsonClient.get_bytes``: the same deadline per attempt as every request r2med sends (``timeout``
bounds connecting, sending and every byte of the answer: a server that trickles or never ends cannot hold an
attempt longer) and the same retries (``r2med.http.retry``): 408, 409, 429 and 5xx, timeouts and dropped
connections after a backoff or the server's ``Retry-After``. A 404 is a missing resource (exit 4); another 4xx fails
at once; a file past ``max_bytes`` is refused without a retry; a server that cannot be reached is a missing
resource after the last attempt. Redirects are followed, at most ``MAX_REDIRECTS`` (10), to http(s) URLs only, under
the attempt's deadline: a loop, one more, or one to another scheme is a missing resource (exit 4) naming the URL and
where it went, at once. URLs are shown without credentials; local addresses are reached without a proxy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from r2med.errors import MissingResourceError, UsageError
from r2med.http.retry import Retry, RetryPolicy, status_retry

#: the largest file accepted (a run file of 100 documents per query is about 1 MB)
MAX_BYTES = 512 * 1024 * 1024
#: what to do about a server that could not be reached
UNREACHABLE_FIX = "check the address and the network, or download the file and pass its path instead"


def _classify(status: int, headers: Mapping[str, str] | Any, text: str, *, where: str, key_hint: str = "") -> Retry:
    """A 404 is a missing file (exit 4); anything else as every other request (``status_retry``)."""
    if status == 404:
        raise MissingResourceError(f"{where}: no file there (HTTP 404); check the URL")
    return status_retry(status, headers, text, where=where)


def download(url: str, *, timeout: float = 60.0, policy: RetryPolicy | None = None, max_bytes: int = MAX_BYTES,
             sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> bytes:
    """The body of ``GET url`` (redirects followed); errors as the module docstring says. ``timeout``: the deadline of
    one attempt, in seconds."""
    from r2med.http.client import JsonClient
    from r2med.http.rules import Secret

    if not url.lower().startswith(("http://", "https://")):
        raise UsageError(f"{url!r} is not an http(s) URL")
    client = JsonClient(url, label="download", secret=Secret(None), timeout=timeout, policy=policy or RetryPolicy(),
                        rng=rng, unreachable_fix=UNREACHABLE_FIX)
    return client.get_bytes(url, max_bytes=max_bytes, classify=_classify, sleep=sleep)
