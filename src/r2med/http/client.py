"""``JsonClient``: POSTs JSON to the paths of one base URL (and GETs them) through ``httpx2``, from threads or asyncio,
and GETs a file's bytes (``get_bytes``: a published run file) under the same deadline and retries.

The one client of r2med's embedding, chat and completion requests. Each call runs the attempts of
``r2med.http.retry`` (one policy, one classification) through ``_attempts``, a generator that says when to send and
how long to wait: ``apost`` drives it with asyncio (one pool per event loop), ``post`` from threads through the same
async exchange on one background event loop (thread-safe, one pool). ``timeout`` is a deadline for a whole attempt
(connect, send, every redirect, every byte of the answer): a server that trickles or never ends its answer cannot
hold an attempt longer. Every read is capped: an answer past ``MAX_ANSWER_BYTES`` (a POST), ``MAX_DESCRIPTION_BYTES``
(a GET of a server's description) or a GET's ``max_bytes`` is cut off, unread when its length says so, and of an
error answer only ``MAX_ERROR_BYTES`` are read. Every failure is an r2med error, never ``httpx2``'s: a body that
cannot be decoded is retried as a lost connection is; a redirect is followed only by a file's GET (``get_bytes``),
at most ``MAX_REDIRECTS`` times, to http(s) URLs, never in a loop, and one that cannot be followed (or an API's,
which is not followed) is a ``MissingResourceError`` naming where it pointed (exit 4: what was asked for is not at
the address given, and no retry changes that). Every text a server sent (a body, a transport error, a redirect's
address) passes through ``_shown``, which cuts the key out, before anything reads it, and a JSON answer is cut again
after decoding (a ``\\u`` escape hides a key from a cut of the raw text). Local servers are reached directly, remote
ones through the usual proxy variables; ``httpx2`` is imported when the first request is sent.
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
from urllib.parse import urlsplit

from r2med.errors import MissingResourceError, ProviderError
from r2med.http.retry import (
    BadAnswer,
    Counters,
    Retry,
    RetryPolicy,
    excerpt,
    exhausted,
    json_object,
    status_retry,
    unknown_host_at_once,
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
#: the largest answer of a GET of a server's description (``/v1/models`` of a server with hundreds of models is
#: ~1 MB; ``/props``, ``/health``: a few KB)
MAX_DESCRIPTION_BYTES = 8 * 2**20
#: how much of an error answer (not 2xx) is read: r2med shows its first 500 characters
MAX_ERROR_BYTES = 64 * 2**10
#: the most redirects a file's GET follows (browsers: 20; a published file is usually one or two away)
MAX_REDIRECTS = 10


def _size(n: int) -> str:
    """``n`` bytes for a message.

    >>> _size(8 * 2**20), _size(4)
    ('8 MiB', '4 bytes')
    """
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n} bytes"


class RedirectFailed(Exception):
    """A redirect a file's GET cannot follow (a loop, too many, not to an http(s) URL); the message is redacted."""


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


class _NotUTF8(str):
    """A 2xx answer's text (bad bytes shown as U+FFFD, for the message) that was not UTF-8: refused as malformed."""


def _is_utf8(body: bytes | bytearray) -> bool:
    """Whether ``body`` is valid UTF-8.

    >>> _is_utf8(b'{"text": "caf\\xc3\\xa9"}'), _is_utf8(b'{"text": "caf\\xe9"}')
    (True, False)
    """
    try:
        bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
             abort: threading.Event | None = None, max_bytes: int | None = None) -> Any:
        """The parsed answer of ``POST base_url/path``; gives up before an attempt, or in a wait, once ``abort`` is set.
        ``max_bytes``: the longest answer read (default ``MAX_ANSWER_BYTES``)."""
        url, data = self._request(path, payload)
        waiter, outcome = abort or threading.Event(), _Outcome()
        for step in self._attempts(url, parse, before, outcome):
            if waiter.is_set():
                raise ProviderError(f"{self.label}: POST {safe_url(url)} cancelled because another request failed")
            if step is _SEND:
                outcome.sent = self._exchange(url, data, max_bytes)
            else:
                waiter.wait(step)
        return outcome.value

    def get(self, path: str, *, parse: Parse = _whole, max_bytes: int | None = None) -> Any:
        """The parsed answer of ``GET base_url/path`` (a server's description: its models, its properties), with the
        same deadline, retries, classification and redaction as ``post``; ``max_bytes``: the longest answer read
        (default ``MAX_DESCRIPTION_BYTES``)."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        cap = MAX_DESCRIPTION_BYTES if max_bytes is None else max_bytes
        outcome = _Outcome()
        for step in self._attempts(url, parse, None, outcome, method="GET"):
            if step is _SEND:
                outcome.sent = _Background.get().run(self._aexchange(url, None, method="GET", max_bytes=cap))
            else:
                threading.Event().wait(step)
        return outcome.value

    async def apost(self, path: str, payload: dict[str, Any], *, parse: Parse = _whole,
                    before: Before | None = None, max_bytes: int | None = None) -> Any:
        """``post`` from asyncio: the same attempts, each awaited (the connections are this event loop's)."""
        url, data = self._request(path, payload)
        outcome = _Outcome()
        for step in self._attempts(url, parse, before, outcome):
            if step is _SEND:
                outcome.sent = await self._aexchange(url, data, max_bytes=max_bytes)
            else:
                await asyncio.sleep(step)
        return outcome.value

    def get_bytes(self, url: str, *, max_bytes: int, classify: Classify | None = None,
                  sleep: Callable[[float], None] | None = None) -> bytes:
        """The body of ``GET url`` (redirects followed, see the module's docstring), at most ``max_bytes``: the same
        attempts as ``post``, each under one deadline of ``timeout`` seconds (every redirect included), from the
        background event loop. ``classify``: what a non-2xx answer means (default ``status_retry``); ``sleep``: how
        to wait between attempts (tests)."""
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
            if isinstance(sent, RedirectFailed):  # the same request is redirected the same way: no retry
                self._answered = True
                raise MissingResourceError(f"{where}: {sent}; {self.unreachable_fix or 'check the address'}")
            if isinstance(sent, BaseException):
                retry = self._transport_retry(sent, where)
                if retry.unreachable and retry.reason == "connection refused" and not self._answered:
                    raise unreachable_at_once(retry, label=self.label, url=shown, fix=self.unreachable_fix)
                if retry.unknown_host is not None:
                    raise unknown_host_at_once(retry, label=self.label, url=shown, fix=self.unreachable_fix)
            elif 200 <= sent[0] < 300:
                self._answered = True
                if isinstance(sent[2], bytes):  # a file's GET (``get_bytes``): its bytes as they came
                    outcome.value = sent[2]
                    return
                try:
                    if isinstance(sent[2], _NotUTF8):
                        raise BadAnswer(f"answer is not UTF-8, which JSON must be: {excerpt(sent[2])!r}")
                    outcome.value = parse(self._decoded(json_object(sent[2]), sent[2], url), attempt + 1)
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
        if isinstance(exc, httpx2.DecodingError):  # a body its Content-Encoding does not describe: as a bad answer
            return Retry(f"an answer that cannot be decoded ({detail})")
        bad_cert = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
        if bad_cert is not None:
            why = getattr(bad_cert, "verify_message", None) or bad_cert.strerror or str(bad_cert)
            raise ProviderError(f"{where}: TLS certificate rejected ({self._shown(why)})") from None
        if isinstance(exc, httpx2.ConnectError):
            if any(isinstance(e, ConnectionRefusedError) for e in chain):
                return Retry("connection refused", unreachable=True)
            unresolved = next((e for e in chain if isinstance(e, socket.gaierror)), None)
            if unresolved is not None:
                host = urlsplit(where.rsplit(" ", 1)[-1]).hostname or "?"
                why = self._shown(str(unresolved) or type(unresolved).__name__)
                return Retry(f"unknown host '{host}' ({why})", unreachable=True, unknown_host=host)
            return Retry(f"cannot connect ({detail})", unreachable=True)
        return Retry(f"connection lost ({detail})")

    def _shown(self, text: str) -> str:
        """The one place a server's text is cut free of the key, before anything (parser, error, log) reads it."""
        return self._secret.redact(text)

    def _decoded(self, answer: dict[str, Any], text: str, url: str) -> dict[str, Any]:
        """``answer`` (decoded from the redacted ``text``) cut free of the key again where JSON escapes could have
        hidden it from the cut of the raw text (``"\\u0042asic ..."``); without an escape it is the text's cut."""
        return self._secret.covering(url).redact_all(answer) if "\\" in text else answer

    def _shown_url(self, url: Any) -> str:
        """A URL a server sent (a redirect's ``Location``), fit for a message: no credentials, no key."""
        return self._shown(excerpt(safe_url(str(url)), 300))

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

    def _exchange(self, url: str, data: bytes, max_bytes: int | None = None) -> Sent:
        return _Background.get().run(self._aexchange(url, data, max_bytes=max_bytes))

    async def _aexchange(self, url: str, data: bytes | None, *, method: str = "POST", max_bytes: int | None = None,
                         raw: bool = False) -> Sent:
        """One attempt under one deadline of ``timeout`` seconds: the status, headers and redacted body, or why not.
        ``raw``: a file's GET (no API headers, redirects followed, a 2xx body returned as its bytes, as they came).
        ``max_bytes``: the longest answer read (default ``MAX_ANSWER_BYTES``)."""
        try:
            return await asyncio.wait_for(self._attempt(url, data, method, max_bytes, raw), self.timeout)
        except (*_transport_errors(), RedirectFailed) as exc:  # TimeoutError (the deadline) is an OSError
            return exc

    async def _attempt(self, url: str, data: bytes | None, method: str, max_bytes: int | None, raw: bool) -> Sent:
        client = self._async_client()
        hops: list[str] = []  # the URLs a file's GET was redirected from, in order
        while True:
            if raw:
                request = client.stream("GET", url, headers={"User-Agent": "r2med"})
            else:
                request = client.stream(method, url, content=data, headers=self._headers())
            async with request as response:
                if raw and response.has_redirect_location:  # followed here (its body unread), under this deadline
                    url = self._redirect(url, response.headers["location"], hops)
                    continue
                body = await self._read(response, max_bytes, raw)
            break
        if raw and 200 <= response.status_code < 300:
            return response.status_code, response.headers, bytes(body)
        text = self._shown(bytes(body).decode("utf-8", "replace"))
        headers: Any = response.headers
        if "location" in headers:  # a redirect not followed: where it points, fit for a message
            headers = {**dict(headers), "location": self._shown_url(_joined(url, headers["location"]))}
        text = self._secret.covering(url).redact(text)
        if 200 <= response.status_code < 300 and not _is_utf8(body):
            # JSON between systems is UTF-8 (RFC 8259, 8.1): an answer that is not is malformed, under every command
            # and protocol alike (never read with its bad bytes replaced: the model did not write U+FFFD)
            text = _NotUTF8(text)
        return response.status_code, headers, text

    async def _read(self, response: Any, max_bytes: int | None, raw: bool) -> bytearray:
        """The body of ``response``, read as far as its cap: a 2xx answer past ``max_bytes`` (default
        ``MAX_ANSWER_BYTES``) raises ``AnswerTooLarge`` (at once when its ``Content-Length`` says so), an error
        answer is cut at ``MAX_ERROR_BYTES``."""
        ok = 200 <= response.status_code < 300
        cap = (MAX_ANSWER_BYTES if max_bytes is None else max_bytes) if ok else MAX_ERROR_BYTES

        def too_large() -> AnswerTooLarge:
            if raw:
                return AnswerTooLarge(f"more than the {cap} accepted bytes", hint="")
            return AnswerTooLarge(f"an answer longer than {_size(cap)}",
                                  **({} if response.request.method == "POST" else {"hint": ""}))

        declared = response.headers.get("content-length", "")
        if ok and declared.isdigit() and int(declared) > cap and "content-encoding" not in response.headers:
            raise too_large()
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > cap:
                if ok:
                    raise too_large()
                del body[cap:]
                break
        return body

    def _redirect(self, url: str, location: str, hops: list[str]) -> str:
        """Where a file's GET of ``url`` goes next, redirected to ``location`` after the redirects from ``hops``
        (appended to); ``RedirectFailed`` for a loop, one redirect too many, or an address that is not http(s)."""
        import httpx2

        try:
            target = httpx2.URL(url).join(location)
        except (httpx2.InvalidURL, ValueError):
            raise RedirectFailed(f"redirected to an address that is no URL ({self._shown(excerpt(location, 100))!r})"
                                 ) from None
        if target.scheme not in ("http", "https"):
            raise RedirectFailed(f"redirected to {self._shown_url(target)}, which is not an http(s) URL: not followed")
        source = httpx2.URL(url)
        if not target.userinfo and source.userinfo and (target.scheme, target.host, target.port) == (
                source.scheme, source.host, source.port):  # the credentials go on within the origin, as httpx's do
            target = target.copy_with(username=source.username, password=source.password)
        hops.append(str(source.copy_with(fragment=None)))
        following = str(target.copy_with(fragment=None))
        if following in hops:
            loop = [*hops[hops.index(following):], following]
            raise RedirectFailed("redirected in a loop: " + " -> ".join(self._shown_url(hop) for hop in loop))
        if len(hops) > MAX_REDIRECTS:
            raise RedirectFailed(f"more than {MAX_REDIRECTS} redirects (the last to {self._shown_url(target)})")
        return following


def _joined(url: str, location: str) -> str:
    """``location`` (a redirect's, maybe relative) as an absolute URL, or as written when it is none."""
    import httpx2

    try:
        return str(httpx2.URL(url).join(location))
    except (httpx2.InvalidURL, ValueError):
        return location


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a request can fail with short of an answer: httpx's request errors (no connection, a lost one, a body
    that cannot be decoded, too many redirects) and the operating system's (the deadline's ``TimeoutError``)."""
    import httpx2

    return httpx2.RequestError, OSError
