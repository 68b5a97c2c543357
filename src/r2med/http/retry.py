"""The one retry policy and error classification of r2med's HTTP clients (embeddings, chat, completions).

What is retried: HTTP 408, 409, 429 and 5xx (but 501), timeouts, dropped connections, a refused one from a server
that has answered before (it may be restarting), and a 2xx answer the caller cannot use (``BadAnswer``: not JSON,
no choices, no embeddings), each after an exponential backoff with jitter or after exactly the wait the server asks
for (``retry-after-ms`` or ``Retry-After``, in seconds or as an HTTP date; a wait longer than
``RetryPolicy.max_retry_after`` fails at once). What fails at once: a server that was never reached (nothing
listens there: ``MissingResourceError``, exit 4, see ``unreachable_at_once``); a host name that does not resolve
(``unknown_host_at_once``: a misspelt host is not a busy server); any other 4xx (``ProviderError`` with
the server's message; a rejected key, an unknown model or a used-up quota as ``FatalProviderError``, which stops a
run of many requests); 404 and 501, "this server does not serve that" (``FatalProviderError`` naming the endpoint
the server lacks); a redirect (``MissingResourceError``, exit 4: an API's is not followed). After the last
attempt: ``MissingResourceError`` (exit 4) when the server could not be reached, else ``ProviderError`` (exit 6)
with the last reason.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from r2med.errors import MissingResourceError, ProviderError

RETRY_STATUSES = frozenset({408, 409, 429})
#: "this server does not serve that": the same request gets the same answer, so none is retried
NOT_SUPPORTED = frozenset({404, 501})


class FatalProviderError(ProviderError):
    """A failure no other request can escape (bad key, unknown model, no quota): a run of many requests stops."""

    fatal = True


class BadAnswer(Exception):
    """A 2xx answer without what the caller needs; retried as a 5xx is. Its message must quote only redacted text."""


@dataclass(frozen=True)
class Retry:
    """A failed attempt worth another: why (redacted), the wait the server asked for, and whether it was unreachable."""

    reason: str
    retry_after: float | None = None
    unreachable: bool = False
    #: a host name that does not resolve: the next attempt asks the same resolver the same name, so none is made
    unknown_host: str | None = None


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
    except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's recursion limit (a hostile body)
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
    return excerpt(str(message), limit)


def excerpt(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters.

    >>> excerpt("a\\n  b", 10), excerpt("x" * 12, 10)
    ('a b', 'xxxxxxxxxx...')
    """
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."


def json_object(text: str) -> dict[str, Any]:
    """The JSON object a 2xx answer holds; ``BadAnswer`` quoting its start when it holds none.

    >>> json_object('{"data": []}')
    {'data': []}
    >>> json_object("<html>hi</html>")
    Traceback (most recent call last):
    ...
    r2med.http.retry.BadAnswer: answer is not JSON (is the base URL an OpenAI-compatible API?): '<html>hi</html>'
    """
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's recursion limit (a hostile answer)
        raise BadAnswer(f"answer is not JSON (is the base URL an OpenAI-compatible API?): {excerpt(text)!r}") from None
    if not isinstance(answer, dict):
        raise BadAnswer(f"answer is JSON but not an object: {excerpt(text)!r}")
    return answer


def status_retry(status: int, headers: Mapping[str, str], text: str, *, where: str, key_hint: str = "") -> Retry:
    """The ``Retry`` of a non-2xx answer whose body is ``text`` (already redacted); raises for what no retry fixes.

    >>> status_retry(503, {"Retry-After": "1"}, '{"error": {"message": "busy"}}', where="m: POST u")
    Retry(reason='HTTP 503: busy', retry_after=1.0, unreachable=False, unknown_host=None)
    >>> status_retry(400, {}, "too long", where="m: POST u")
    Traceback (most recent call last):
    ...
    r2med.errors.ProviderError: m: POST u failed with HTTP 400: too long
    """
    message = error_message(text)
    failed = f"{where} failed with HTTP {status}: {message}"
    if status in (401, 403):
        raise FatalProviderError(f"{failed} (check the API key{f' in ${key_hint}' if key_hint else ''})")
    if status in NOT_SUPPORTED:
        raise FatalProviderError(f"{failed} ({not_supported(where, status)})")
    if status == 429 and "insufficient_quota" in text:
        raise FatalProviderError(f"{failed} (quota used up)")
    if 300 <= status < 400:
        raise redirect_not_followed(status, headers.get("location"), where=where)
    if status < 500 and status not in RETRY_STATUSES:
        raise ProviderError(failed)
    return Retry(f"HTTP {status}: {message}", parse_retry_after(headers))


def redirect_not_followed(status: int, location: str | None, *, where: str) -> MissingResourceError:
    """The error of an API's redirect (HTTP ``status`` to ``location``, shown without credentials), which is not
    followed: a POST's body and the key would go on to an address nobody gave. Exit 4 as a redirect that cannot be
    followed is (``r2med.http.client``): what was asked for is not at the address given.

    >>> redirect_not_followed(308, "https://elsewhere.example/v1", where="m: POST http://h/v1/x")
    MissingResourceError("m: POST http://h/v1/x was redirected (HTTP 308) to https://elsewhere.example/v1: an API's redirect is not followed; use the address it points to as the base URL")
    """
    if not location:
        return MissingResourceError(f"{where} was redirected (HTTP {status}) without saying where; check the address")
    return MissingResourceError(f"{where} was redirected (HTTP {status}) to {location}: an API's redirect is not "
                                "followed; use the address it points to as the base URL")


#: what to do about a server that could not be reached (an API r2med POSTs to)
START_SERVER = ("start the server first (e.g. `vllm serve MODEL --port 8000` or `llama-server -m MODEL.gguf --port "
                "8080`) and pass its address as --base-url http://HOST:PORT/v1 (or $OPENAI_BASE_URL)")


def not_supported(where: str, status: int) -> str:
    """What a 404 or 501 answer says the server lacks; ``where`` is ``"<label>: POST <url>"`` (or GET).

    >>> not_supported("openai: POST http://h:8080/v1/embeddings", 501)
    'the server at http://h:8080/v1 does not support /embeddings (HTTP 501 Not Implemented): start one that serves it (llama-server needs --embeddings) or pick another --base-url'
    >>> not_supported("m: POST http://h/v1/chat/completions", 404)
    'the server at http://h/v1 has no /chat/completions for this model (HTTP 404 Not Found): is the model id right, and is --base-url the API (ending in /v1)?'
    """
    sent = re.search(r": (?:POST|GET) (\S+)$", where)
    url = sent.group(1) if sent else where
    api = re.match(r"^(.*/v\d+)/(.+)$", url)  # the API's base URL (up to /v1) and the endpoint after it
    base, endpoint = api.groups() if api else url.rpartition("/")[::2]
    hint = " (llama-server needs --embeddings)" if endpoint == "embeddings" else ""
    if status == 501:
        return (f"the server at {base} does not support /{endpoint} (HTTP 501 Not Implemented): start one that serves "
                f"it{hint} or pick another --base-url")
    return (f"the server at {base} has no /{endpoint} for this model (HTTP 404 Not Found): is the model id right, "
            "and is --base-url the API (ending in /v1)?")


def unreachable_at_once(retry: Retry, *, label: str, url: str, fix: str | None = None) -> MissingResourceError:
    """The error of a first attempt that found nothing listening: no retry (a server that is not started does not
    start in the next 30 s), one line, exit 4; ``fix``: what to do (default: start it, ``START_SERVER``).

    >>> unreachable_at_once(Retry("connection refused", unreachable=True), label="m", url="http://127.0.0.1:9/v1/x")
    MissingResourceError('m: cannot reach http://127.0.0.1:9/v1/x: connection refused (is the server started?); start the server first (e.g. `vllm serve MODEL --port 8000` or `llama-server -m MODEL.gguf --port 8080`) and pass its address as --base-url http://HOST:PORT/v1 (or $OPENAI_BASE_URL)')
    """
    return MissingResourceError(f"{label}: cannot reach {url}: {retry.reason} (is the server started?); "
                                f"{fix or START_SERVER}")


def unknown_host_at_once(retry: Retry, *, label: str, url: str, fix: str | None = None) -> MissingResourceError:
    """The error of an address whose host name does not resolve (a misspelt host, no DNS): no retry, one line, exit 4.

    >>> unknown_host_at_once(Retry("unknown host 'localhots' ([Errno -2] Name or service not known)", unreachable=True,
    ...                            unknown_host="localhots"), label="m", url="http://localhots:8000/v1/x")
    MissingResourceError("m: cannot reach http://localhots:8000/v1/x: unknown host 'localhots' ([Errno -2] Name or service not known); check the host name in the address (or the network's DNS), then: start the server first (e.g. `vllm serve MODEL --port 8000` or `llama-server -m MODEL.gguf --port 8080`) and pass its address as --base-url http://HOST:PORT/v1 (or $OPENAI_BASE_URL)")
    """
    return MissingResourceError(f"{label}: cannot reach {url}: {retry.reason}; check the host name in the address (or "
                                f"the network's DNS), then: {fix or START_SERVER}")


def exhausted(retry: Retry, *, label: str, url: str, attempts: int, method: str = "POST",
              fix: str | None = None) -> Exception:
    """The error after the last of ``attempts`` to ``method`` ``url`` (shown without credentials) failed with ``retry``;
    ``fix``: what to do about an unreachable server (default: start it, ``START_SERVER``).

    >>> exhausted(Retry("HTTP 500: x"), label="m", url="http://h/v1/embeddings", attempts=3)
    ProviderError('m: POST http://h/v1/embeddings still failing after 3 attempts (2 retries); last error: HTTP 500: x')
    """
    if retry.unreachable:
        return MissingResourceError(f"{label}: cannot reach {url}: {retry.reason} on {attempts} attempts; "
                                    f"{fix or START_SERVER}")
    return ProviderError(f"{label}: {method} {url} still failing after {attempts} attempts ({attempts - 1} retries); "
                         f"last error: {retry.reason}")


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

    def delay(self, attempt: int, retry: Retry, *, where: str, rng: random.Random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (from 0): the server's wait, else the backoff.

        >>> RetryPolicy().delay(0, Retry("HTTP 429", 2.5), where="m: POST u", rng=random.Random(0))
        2.5
        >>> RetryPolicy().delay(0, Retry("HTTP 429", 600.0), where="m: POST u", rng=random.Random(0))
        Traceback (most recent call last):
        ...
        r2med.errors.ProviderError: m: POST u asks to wait 600 s before retrying (more than 120 s); last error: HTTP 429
        """
        if retry.retry_after is None:
            return backoff_delay(attempt, base=self.base_delay, cap=self.max_delay, rng=rng)
        if retry.retry_after > self.max_retry_after:
            raise ProviderError(f"{where} asks to wait {retry.retry_after:.0f} s before retrying "
                                f"(more than {self.max_retry_after:.0f} s); last error: {retry.reason}")
        return retry.retry_after
