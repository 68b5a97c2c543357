"""``JsonClient``: POSTs JSON to the paths of one base URL (and GETs them) through ``httpx2``, from threads or asyncio,
and GETs a file's bytes (``get_bytes``: a published run file) under the same deadline and retries.

The one client of r2med's embedding, chat and completion requests. Each call runs the attempts of
``r2med.http.retry`` (one policy, one classification) through ``_attempts``, a generator that says when to send and
how long to wait: ``apost`` drives it with asyncio (one pool per event loop), ``post`` from threads through the same
async exchange on one background event loop (thread-safe, one pool). ``timeout`` is a deadline for a whole attempt
(connect, send, every byte of the answer): a server that trickles or never ends its answer cannot hold an attempt
longer, and an answer past ``MAX_ANSWER_BYTES`` is cut off. Every text a server sent (a body, a transport error) passes through ``_shown``, which
cuts the key out, before anything reads it. Local servers are reached directly, remote ones through the usual
proxy variables; ``httpx2`` is imported when the first request is sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import ssl
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from r2med.errors import ProviderError
from r2med.http.retry import (
    BadAnswer,
    Counters,
    Retry,
    RetryPolicy,
    exhausted,
    json_object,
    status_retry,
    unreachable_at_once,
)
from r2med.http.rules import Secret, is_local_url, safe_url

logger = logging.getLogger(__name__)

#: ``(answer, attempts) -> value``: reads a 2xx JSON answer; raises ``BadAnswer`` to have it retried
Parse = Callable[[dict[str, Any], int], Any]
#: ``(attempt) -> None``, called before each attempt (from 0); may raise to send nothing (a spent budget)
Before = Callable[[int], None]
#: ``(status, headers, redacted body, where=..., key_hint=...) -> Retry`` of a non-2xx answer, or raises (``status_retry``)
Classify = Callable[..., Retry]
_SEND = object()
#: what one attempt gave: ``(status, headers, redacted body)`` or the transport's exception
Sent = tuple[int, Any, str] | BaseException | None
#: the largest answer read (an embeddings batch of 128 texts x 3,072 dimensions is ~8 MB of JSON)
MAX_ANSWER_BYTES = 256 * 2**20


class AnswerTooLarge(OSError):
    """An answer longer than ``MAX_ANSWER_BYTES`` (or a GET's ``max_bytes``): the attempt is dropped, as a lost
    connection is, and not retried (the same request gets the same answer)."""

    def __init__(self, message: str, *, hint: str = "; is --base-url the API's address?") -> None:
        super().__init__(message)
        self.hint = hint


class _Background:
    """One event loop in a daemon thread, for the blocking ``post``: its requests run as ``apost``'s do, under one
    deadline each. Made again in a forked child (the thread does not survive a fork)."""

    _lock = threading.Lock()
    _current: _Background | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="r2med-http", daemon=True).start()

    @classmethod
    def get(cls) -> _Background:
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls()
            return cls._current

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


class _Outcome:
    """What the driver of ``JsonClient._attempts`` hands it (``sent``) and what it hands back (``value``)."""

    __slots__ = ("sent", "value")

    def __init__(self) -> None:
        self.sent: Any = None
        self.value: Any = None


def _whole(answer: dict[str, Any], attempts: int) -> dict[str, Any]:
    return answer


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


class JsonClient:
    """JSON POSTs to ``base_url`` + a path, with retries; ``label`` starts every message (a provider, a model id).

    ``stats`` receives ``requests``, ``retries`` and ``waited_s`` (seconds slept before retries). ``timeout`` is the
    deadline of a whole attempt, in seconds. ``key_hint`` names the variable the key came from, for a rejected key;
    ``unreachable_fix`` what to do when the server cannot be reached (default: start it).
    """

    def __init__(self, base_url: str, *, label: str, secret: Secret, timeout: float, policy: RetryPolicy,
                 stats: Counters | None = None, key_hint: str = "", rng: random.Random | None = None,
                 unreachable_fix: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.unreachable_fix = unreachable_fix
        self.label = label
        self.timeout = timeout
        self.policy = policy
        self.stats = stats or Counters("requests", "retries", "waited_s")
        self.key_hint = key_hint
        self._secret = secret.covering(self.base_url)  # a key given in the URL is cut out as the API key is
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        #: whether the server has answered once: a refused connection before that fails at once (nothing listens),
        #: after it is retried (a server restarting)
        self._answered = False
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"JsonClient({safe_url(self.base_url)!r}, label={self.label!r})"

    # ------------------------------------------------------------------ the two drivers
    def post(self, path: str, payload: dict[str, Any], *, parse: Parse = _whole, before: Before | None = None,
             abort: threading.Event | None = None) -> Any:
        """The parsed answer of ``POST base_url/path``; gives up before an attempt, or in a wait, once ``abort`` is set."""
        url, data = self._request(path, payload)
        waiter, outcome = abort or threading.Event(), _Outcome()
        for step in self._attempts(url, parse, before, outcome):
            if waiter.is_set():
                raise ProviderError(f"{self.label}: POST {safe_url(url)} cancelled because another request failed")
            if step is _SEND:
                outcome.sent = self._exchange(url, data)
            else:
                waiter.wait(step)
        return outcome.value

    def get(self, path: str, *, parse: Parse = _whole) -> Any:
        """The parsed answer of ``GET base_url/path`` (a server's description: its models, its properties), with the
        same deadline, retries, classification and redaction as ``post``."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        outcome = _Outcome()
        for step in self._attempts(url, parse, None, outcome, method="GET"):
            if step is _SEND:
                outcome.sent = _Background.get().run(self._aexchange(url, None, method="GET"))
            else:
                threading.Event().wait(step)
        return outcome.value

    async def apost(self, path: str, payload: dict[str, Any], *, parse: Parse = _whole,
                    before: Before | None = None) -> Any:
        """``post`` from asyncio: the same attempts, each awaited (the connections are this event loop's)."""
        url, data = self._request(path, payload)
        outcome = _Outcome()
        for step in self._attempts(url, parse, before, outcome):
            if step is _SEND:
                outcome.sent = await self._aexchange(url, data)
            else:
                await asyncio.sleep(step)
        return outcome.value

    def get_bytes(self, url: str, *, max_bytes: int, classify: Classify | None = None,
                  sleep: Callable[[float], None] | None = None) -> bytes:
        """The body of ``GET url`` (redirects followed), at most ``max_bytes``: the same attempts as ``post``, each
        under one deadline of ``timeout`` seconds, from the background event loop. ``classify``: what a non-2xx
        answer means (default ``status_retry``); ``sleep``: how to wait between attempts (tests)."""
        outcome = _Outcome()
        for step in self._attempts(url, _whole, None, outcome, method="GET", classify=classify):
            if step is _SEND:
                outcome.sent = _Background.get().run(self._aexchange(url, None, method="GET", max_bytes=max_bytes,
                                                                     raw=True))
            else:
                (sleep or threading.Event().wait)(step)
        return outcome.value

    def close(self) -> None:
        """Close the blocking ``post``'s connections (``aclose`` closes the running event loop's)."""
        background = _Background._current
        if background is not None and background.pid == os.getpid() and background.loop in self._async:
            background.run(self.aclose())

    async def aclose(self) -> None:
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    # ------------------------------------------------------------------ the policy, once
    def _attempts(self, url: str, parse: Parse, before: Before | None, outcome: _Outcome, *, method: str = "POST",
                  classify: Classify | None = None) -> Iterator[Any]:
        """Yields ``_SEND`` (the driver puts what the attempt gave in ``outcome.sent``) or a delay in seconds; ends
        with the parsed answer in ``outcome.value`` (``get_bytes``: the body's bytes), or raises."""
        shown = safe_url(url)
        where = f"{self.label}: {method} {shown}"
        policy = self.policy
        for attempt in range(policy.max_retries + 1):
            if before is not None:
                before(attempt)
            self.stats.add("requests")
            yield _SEND
            sent = outcome.sent
            if isinstance(sent, BaseException):
                retry = self._transport_retry(sent, where)
                if retry.unreachable and retry.reason == "connection refused" and not self._answered:
                    raise unreachable_at_once(retry, label=self.label, url=shown, fix=self.unreachable_fix)
            elif 200 <= sent[0] < 300:
                self._answered = True
                if isinstance(sent[2], bytes):  # a file's GET (``get_bytes``): its bytes as they came
                    outcome.value = sent[2]
                    return
                try:
                    outcome.value = parse(json_object(sent[2]), attempt + 1)
                    return
                except BadAnswer as exc:
                    retry = Retry(str(exc))
            else:
                self._answered = True
                retry = (classify or status_retry)(sent[0], sent[1], sent[2], where=where, key_hint=self.key_hint)
            if attempt == policy.max_retries:
                raise exhausted(retry, label=self.label, url=shown, attempts=attempt + 1, method=method,
                                fix=self.unreachable_fix)
            delay = policy.delay(attempt, retry, where=where, rng=self._rng)
            self.stats.add("retries")
            self.stats.add("waited_s", delay)
            logger.info("%s: %s, retry %d/%d in %.2f s%s", where, retry.reason, attempt + 1, policy.max_retries,
                        delay, " (as the server asked)" if retry.retry_after is not None else "")
            yield delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _transport_retry(self, exc: BaseException, where: str) -> Retry:
        """The ``Retry`` of a request that got no answer; raises for a rejected TLS certificate."""
        import httpx2

        chain = _chain(exc)
        detail = self._shown(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, AnswerTooLarge):  # the same request gets the same answer: no retry
            raise ProviderError(f"{where}: {exc}{exc.hint}") from None
        if isinstance(exc, (httpx2.TimeoutException, TimeoutError)):
            return Retry(f"timed out after {self.timeout:g} s")
        bad_cert = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
        if bad_cert is not None:
            why = getattr(bad_cert, "verify_message", None) or bad_cert.strerror or str(bad_cert)
            raise ProviderError(f"{where}: TLS certificate rejected ({self._shown(why)})") from None
        if isinstance(exc, httpx2.ConnectError):
            if any(isinstance(e, ConnectionRefusedError) for e in chain):
                return Retry("connection refused", unreachable=True)
            if any(isinstance(e, socket.gaierror) for e in chain):
                return Retry(f"unknown host ({detail})", unreachable=True)
            return Retry(f"cannot connect ({detail})", unreachable=True)
        return Retry(f"connection lost ({detail})")

    def _shown(self, text: str) -> str:
        """The one place a server's text is cut free of the key, before anything (parser, error, log) reads it."""
        return self._secret.redact(text)

    # ------------------------------------------------------------------ transport
    def _request(self, path: str, payload: dict[str, Any]) -> tuple[str, bytes]:
        return f"{self.base_url}/{path.lstrip('/')}", json.dumps(payload, ensure_ascii=False,
                                                                 separators=(",", ":")).encode("utf-8")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "r2med"}
        if self._secret:
            headers["Authorization"] = f"Bearer {self._secret.reveal()}"
        return headers

    def _options(self) -> dict[str, Any]:
        import httpx2

        # Local servers are never reached through a proxy; remote ones honour the usual proxy variables.
        return {"timeout": httpx2.Timeout(self.timeout), "trust_env": not is_local_url(self.base_url),
                "limits": httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
                "follow_redirects": False}

    def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                import httpx2

                client = self._async[loop] = httpx2.AsyncClient(**self._options())
            return client

    def _exchange(self, url: str, data: bytes) -> Sent:
        return _Background.get().run(self._aexchange(url, data))

    async def _aexchange(self, url: str, data: bytes | None, *, method: str = "POST", max_bytes: int | None = None,
                         raw: bool = False) -> Sent:
        """One attempt under one deadline of ``timeout`` seconds: the status, headers and redacted body, or why not.
        ``raw``: a file's GET (no API headers, redirects followed, a 2xx body returned as its bytes, as they came)."""
        try:
            return await asyncio.wait_for(self._attempt(url, data, method, max_bytes, raw), self.timeout)
        except _transport_errors() as exc:  # TimeoutError (the deadline) is an OSError
            return exc

    async def _attempt(self, url: str, data: bytes | None, method: str, max_bytes: int | None, raw: bool) -> Sent:
        client = self._async_client()
        if raw:
            request = client.stream("GET", url, headers={"User-Agent": "r2med"}, follow_redirects=True)
        else:
            request = client.stream(method, url, content=data, headers=self._headers())
        async with request as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if max_bytes is not None and len(body) > max_bytes:
                    raise AnswerTooLarge(f"more than the {max_bytes} accepted bytes", hint="")
                if len(body) > MAX_ANSWER_BYTES and max_bytes is None:
                    raise AnswerTooLarge(f"an answer longer than {MAX_ANSWER_BYTES // 2**20} MiB")
        if raw and 200 <= response.status_code < 300:
            return response.status_code, response.headers, bytes(body)
        text = self._shown(bytes(body).decode("utf-8", "replace"))
        return response.status_code, response.headers, self._secret.covering(url).redact(text)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx2

    return httpx2.TransportError, OSError
