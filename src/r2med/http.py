"""The shared HTTP service: a JSON POST with retries, backoff, ``Retry-After``, and keys kept secret.

Used by the embedding API encoders (``retrievers.dense.api_base``) and, for its generic helpers
(``Secret``, ``safe_url``, ``backoff_delay``, ...), by the chat client (``llm.client``).
Standard library only (``urllib``), so the API encoders need no extra package. What is retried:
HTTP 408, 409, 429 and 5xx, timeouts and dropped connections, each after an exponential backoff
with jitter, or after exactly the wait the server asks for (``retry-after-ms`` or ``Retry-After``,
in seconds or as an HTTP date). What fails at once: any other 4xx (``ProviderError`` with the
server's message), a 429 that says the quota is used up, an answer that is not JSON, and a server
that cannot be reached at all (``MissingResourceError``: refused connection, unknown host).

The API key travels only in the ``Authorization`` header. It is held in a ``Secret`` whose repr
hides it, and it is cut out of every server message before that message goes into an error.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import logging
import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from r2med.errors import MissingResourceError, ProviderError

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429})


class Secret:
    """An API key that never shows itself in a repr, a str or a log line.

    >>> key = Secret("sk-abc123")
    >>> key, str(key), bool(Secret(""))
    (Secret('***'), "Secret('***')", False)
    >>> key.redact("bad key sk-abc123 given")
    'bad key *** given'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value or ""

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        return text.replace(self._value, "***") if self._value else text

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __reduce__(self) -> Any:  # never pickle a key into a file or another process
        raise TypeError("a Secret cannot be pickled")


def url_host(url: str) -> str:
    """``host[:port]`` of ``url``, without any ``user:password@`` part.

    >>> url_host("https://user:pw@api.openai.com/v1")
    'api.openai.com'
    >>> url_host("http://127.0.0.1:8000/v1")
    '127.0.0.1:8000'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def safe_url(url: str) -> str:
    """``url`` without credentials, fit for messages.

    >>> safe_url("http://u:p@localhost:8000/v1/embeddings?x=1")
    'http://localhost:8000/v1/embeddings'
    """
    parts = urlsplit(url)
    return f"{parts.scheme}://{url_host(url)}{parts.path}"


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine or a private network, where servers often need no key.

    Local means: ``localhost``, a loopback or private IP address, or a single-label host name
    (``gpu-node-3``), as used for vLLM / TEI / Infinity servers on a cluster.

    >>> [is_local_url(u) for u in ("http://localhost:8000/v1", "http://127.0.0.1/v1", "http://10.1.2.3/v1")]
    [True, True, True]
    >>> [is_local_url(u) for u in ("http://gpu-node-3:8000/v1", "https://api.openai.com/v1")]
    [True, False]
    """
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost") or "." not in host and ":" not in host:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt + 1``: exponential, capped, with jitter.

    ``min(cap, base * 2**attempt)`` scaled by a random factor in ``[0.5, 1]`` ("equal jitter"),
    so concurrent clients spread out but never retry sooner than half the nominal delay.

    >>> rng = random.Random(0)
    >>> [round(backoff_delay(a, base=1.0, cap=10.0, rng=rng), 3) for a in range(5)]
    [0.922, 1.758, 2.841, 5.036, 7.556]
    >>> backoff_delay(30, base=1.0, cap=10.0, rng=random.Random(1)) <= 10.0
    True
    """
    nominal = min(cap, base * (2.0 ** min(attempt, 62)))
    return nominal * (0.5 + 0.5 * rng.random())


def parse_retry_after(headers: Mapping[str, str] | Any, now: float | None = None) -> float | None:
    """The wait a server asks for, in seconds, or ``None``.

    Reads ``retry-after-ms`` (OpenAI) first, then ``Retry-After`` as seconds (fractions accepted)
    or as an HTTP date. Negative or unreadable values count as no request.

    >>> parse_retry_after({"Retry-After": "2"}), parse_retry_after({"retry-after-ms": "250"})
    (2.0, 0.25)
    >>> parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0)
    10.0
    >>> parse_retry_after({"Retry-After": "soon"}) is None, parse_retry_after({}) is None
    (True, True)
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        value = when.timestamp() - (time.time() if now is None else now)
        return max(value, 0.0)
    return value if value >= 0 else None


def error_message(body: bytes | str, limit: int = 500) -> str:
    """The human message in an API error body (OpenAI, Voyage, FastAPI and plain-text shapes).

    >>> error_message(b'{"error": {"message": "Invalid model", "type": "invalid_request_error"}}')
    'Invalid model'
    >>> error_message('{"detail": "Provided API key is invalid."}')
    'Provided API key is invalid.'
    >>> error_message(b"<html>Bad Gateway</html>")
    '<html>Bad Gateway</html>'
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message") or error.get("code")
        elif isinstance(error, str):
            message = error
        message = message or data.get("detail") or data.get("message")
    if message is None:
        message = text
    message = " ".join(str(message).split())
    return message if len(message) <= limit else message[:limit] + "..."


def _quota_exhausted(body: bytes) -> bool:
    """A 429 that no wait will fix (OpenAI's ``insufficient_quota``)."""
    return b"insufficient_quota" in body


class Counters:
    """Thread-safe named counters (requests, retries, tokens, ...)."""

    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(names, 0)

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + amount

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self._values)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. ``base_delay`` is small in tests (0.01 s)."""

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 30.0
    #: A server asking for a longer wait than this is a failure, not something to sleep through.
    max_retry_after: float = 120.0


class _Transient(Exception):
    """A failure worth retrying; its message is safe to show."""


class JsonPoster:
    """POSTs JSON to one URL and returns the parsed JSON answer, retrying what is worth retrying.

    ``counters`` receives ``requests``, ``retries`` and ``waited_s`` (seconds slept before
    retries). ``timeout`` bounds connecting and each read, in seconds. ``post(..., abort=event)``
    gives up before its next attempt, or in the middle of a wait, once ``event`` is set.
    """

    def __init__(
        self,
        url: str,
        *,
        provider: str,
        secret: Secret,
        timeout: float,
        policy: RetryPolicy,
        counters: Counters,
        key_hint: str = "",
        user_agent: str = "r2med",
        rng: random.Random | None = None,
    ) -> None:
        self.url = url
        self.provider = provider
        self.timeout = timeout
        self.policy = policy
        self.counters = counters
        self._secret = secret
        self._key_hint = key_hint
        self._rng = rng or random.Random()
        self._headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": user_agent}
        # Local servers are never reached through a proxy; remote ones honour the usual proxy variables.
        handlers = [urllib.request.ProxyHandler({})] if is_local_url(url) else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"JsonPoster({safe_url(self.url)!r}, provider={self.provider!r})"

    def post(self, payload: dict[str, Any], *, abort: threading.Event | None = None) -> dict[str, Any]:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        where = f"POST {safe_url(self.url)}"
        policy = self.policy
        waiter = abort or threading.Event()
        for attempt in range(policy.max_retries + 1):
            if waiter.is_set():
                raise ProviderError(f"{self.provider}: {where} cancelled because another request failed")
            self.counters.add("requests")
            retry_after: float | None = None
            try:
                status, headers, body = self._send(data, where)
            except _Transient as exc:
                reason = str(exc)
            else:
                if 200 <= status < 300:
                    return self._parse(body, where)
                message = self._secret.redact(error_message(body))
                if (status < 500 and status not in RETRY_STATUSES) or (status == 429 and _quota_exhausted(body)):
                    hint = f" (check the key in ${self._key_hint})" if status in (401, 403) and self._key_hint else ""
                    raise ProviderError(f"{self.provider}: {where} failed with HTTP {status}: {message}{hint}")
                reason = f"HTTP {status}: {message}"
                retry_after = parse_retry_after(headers)
            if attempt == policy.max_retries:
                raise ProviderError(
                    f"{self.provider}: {where} still failing after {attempt + 1} attempts "
                    f"({policy.max_retries} retries); last error: {reason}"
                )
            if retry_after is not None and retry_after > policy.max_retry_after:
                raise ProviderError(
                    f"{self.provider}: {where} asks to wait {retry_after:.0f} s before retrying "
                    f"(more than {policy.max_retry_after:.0f} s); last error: {reason}"
                )
            delay = retry_after if retry_after is not None else backoff_delay(
                attempt, base=policy.base_delay, cap=policy.max_delay, rng=self._rng
            )
            self.counters.add("retries")
            self.counters.add("waited_s", delay)
            logger.info(
                "%s: %s, retry %d/%d in %.2f s%s",
                self.provider, reason, attempt + 1, policy.max_retries, delay,
                " (as the server asked)" if retry_after is not None else "",
            )
            waiter.wait(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, data: bytes, where: str) -> tuple[int, Any, bytes]:
        headers = dict(self._headers)
        if self._secret:
            headers["Authorization"] = f"Bearer {self._secret.reveal()}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read()
            except (OSError, http.client.HTTPException):
                body = b""
            return exc.code, exc.headers or {}, body
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (ConnectionRefusedError, socket.gaierror)):
                raise MissingResourceError(
                    f"{self.provider}: cannot reach {safe_url(self.url)} ({_describe(reason)}); "
                    "is the server running and the base_url right?"
                ) from None
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ProviderError(f"{self.provider}: {where}: TLS certificate rejected ({reason})") from None
            if isinstance(reason, TimeoutError):
                raise _Transient(f"timed out after {self.timeout:g} s") from None
            raise _Transient(f"connection failed ({_describe(reason)})") from None
        except TimeoutError:
            raise _Transient(f"timed out after {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Transient(f"connection lost ({_describe(exc)})") from None

    def _parse(self, body: bytes, where: str) -> dict[str, Any]:
        try:
            answer = json.loads(body)
        except ValueError:
            snippet = self._secret.redact(body[:200].decode("utf-8", "replace"))
            raise ProviderError(
                f"{self.provider}: {where} answered with something that is not JSON "
                f"(is the base_url an OpenAI-compatible API?): {snippet!r}"
            ) from None
        if not isinstance(answer, dict):
            raise ProviderError(f"{self.provider}: {where} answered with JSON that is not an object")
        return answer


def _describe(exc: BaseException | str) -> str:
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
