"""Search-R1's retrieval API over any r2med retriever: ``POST /retrieve`` (``r2med serve``), on uvicorn + Starlette.

Search-R1 (``search_r1/search/retrieval_server.py``) trains and evaluates its agents against a FastAPI server
answering ``POST /retrieve``. :class:`RetrievalServer` answers the same requests over a
:class:`~r2med.agent.search.CorpusSearcher`, so Search-R1's code (or anything written for its server) searches
an R2MED corpus with BM25 or any dense model r2med runs:

- request: ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}``; a missing, null or 0
  ``topk`` is the server's default (their ``if not request.topk: request.topk = default``, default 3 as their
  launch script's ``--topk 3``); ``return_scores`` defaults to false;
- response: ``{"result": [one list per query]}``; with ``return_scores`` each entry is
  ``{"document": {"id", "contents"}, "score": float}``, without it the document dict ``{"id", "contents"}``
  itself (their server fails in that case). ``contents`` is ``search_r1_contents``: the quoted document id
  as the title line, then the text;
- ``GET /health``: ``{"status": "ok", "corpus", "source", "retriever", "documents", "topk", ...}``.

HTTP itself (parsing, Content-Length and chunked framing, ``Expect: 100-continue``, keep-alive, pipelining,
idle timeouts) is uvicorn's (its h11 protocol) and the routing Starlette's: a request that is not valid HTTP/1.1
(a Content-Length that is not a number, two that differ) gets uvicorn's plain-text 400 and the connection is
closed. Refusals of this server are JSON ``{"error": "..."}``: 400 malformed JSON (or a body that is not UTF-8,
or a ``topk`` outside 1..``max_top_k``), 422 a well-formed body of the wrong shape or types (as FastAPI
answers), 411 a POST with neither Content-Length nor chunked body, 413 a body over ``max_body`` bytes, more
than ``max_queries`` queries, or an answer that could pass ``max_response`` bytes
(:class:`~r2med.agent.retrieve_api.ResponseBound`, checked before searching), 404 another path, 405 another
method (any method, with ``Allow``), 408 a body that has not arrived ``body_timeout`` seconds (30) after its
headers, 503 more than ``max_connections`` connections, 500 a failed search. Unknown fields are ignored (as
pydantic does) and the Content-Type is not checked (``curl -d`` says form data). Searches run in worker threads,
``max_searches`` at a time (the searcher itself searches one batch at a time), so the event loop goes on
answering; a request's repeated query texts are searched once (and answered each time). An answer is streamed
(:mod:`r2med.agent.retrieve_stream`): its hits held as arrays, its JSON made 64 KiB at a time as the connection takes
it, its length sent first (Content-Length), so a client that does not read holds about half a megabyte.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import socket
import threading
import time
from typing import Any

from r2med.agent.retrieve_api import (
    DEFAULT_TOP_K,
    MAX_QUERIES,
    MAX_RESPONSE,
    MAX_TOP_K,
    RequestError,
    ResponseBound,
    decode_body,
    parse_request,
)
from r2med.agent.retrieve_stream import CorpusEntries, StreamedAnswer, search_hits
from r2med.agent.search import CorpusSearcher
from r2med.errors import MissingExtraError, ProviderError, UsageError

logger = logging.getLogger(__name__)

#: Search-R1's port (uvicorn on port 8000); the default top k is ``retrieve_api.DEFAULT_TOP_K``
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: the limits of one request (besides the request parsing's ``MAX_TOP_K``, ``MAX_QUERIES`` and ``MAX_RESPONSE``)
MAX_BODY = 1 << 20
#: seconds a request's body may take to arrive once its headers have (then 408); also how long an idle
#: keep-alive connection stays open (uvicorn's ``timeout_keep_alive``)
BODY_TIMEOUT = 30.0
READ_TIMEOUT = BODY_TIMEOUT  # the name of r2med 0.1's http.server
#: the most bytes of a refused request's body read (and dropped) before answering: closing with unread bytes
#: resets the connection, and the client would lose the answer saying why it was refused
DRAIN_LIMIT = 16 << 20
#: searches running at once (worker threads); more requests wait for a free one
MAX_SEARCHES = 4
#: connections (and requests in progress) at once; past them uvicorn answers 503
MAX_CONNECTIONS = 512
#: seconds :meth:`RetrievalServer.stop` (and SIGINT / SIGTERM) waits for requests in progress before closing
SHUTDOWN_GRACE = 10.0

#: path -> the methods it answers (HEAD goes with GET)
ROUTES = {"/retrieve": ("POST",), "/health": ("GET", "HEAD")}


def require_extra() -> tuple[Any, Any]:
    """``(uvicorn, starlette)``, or MissingExtraError (exit 3) naming the ``serve`` extra."""
    try:
        import starlette
        import uvicorn
    except ImportError as exc:
        raise MissingExtraError(exc.name or "uvicorn", "serve", "r2med serve (the HTTP server)") from exc
    return uvicorn, starlette


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_options(*, port: int, default_top_k: int, max_top_k: int, max_body: int, max_queries: int,
                  max_response: int = MAX_RESPONSE, body_timeout: float = BODY_TIMEOUT, max_searches: int = MAX_SEARCHES,
                  max_connections: int = MAX_CONNECTIONS) -> None:
    """UsageError (exit 2) naming the first option of a :class:`RetrievalServer` that cannot be used."""
    if not 0 <= port <= 65535:
        raise UsageError(f"port {port} is not a TCP port: pass 1..65535 (0: any free port)")
    if max_top_k < 1:
        raise UsageError(f"the largest topk a request may ask for must be at least 1, got {max_top_k}")
    if not 1 <= default_top_k <= max_top_k:
        raise UsageError(f"the default top k must be between 1 and {max_top_k}, got {default_top_k}")
    if max_body < 1:
        raise UsageError(f"the largest request body must be at least 1 byte, got {max_body}")
    if max_queries < 1:
        raise UsageError(f"the most queries per request must be at least 1, got {max_queries}")
    if max_response < 1:
        raise UsageError(f"the largest answer must be at least 1 byte, got {max_response}")
    if not body_timeout > 0:
        raise UsageError(f"the body timeout must be more than 0 seconds, got {body_timeout}")
    if max_searches < 1:
        raise UsageError(f"the searches at once must be at least 1, got {max_searches}")
    if max_connections < 1:
        raise UsageError(f"the connections at once must be at least 1, got {max_connections}")


def _too_large(length: int, max_body: int) -> str:
    return (f"the request body has {length} bytes; the limit is {max_body} (r2med serve --max-body): send fewer "
            "queries per request")


class _Body:
    """Reads one request's body through ASGI ``receive`` within a deadline (the 408), up to a limit (the 413)."""

    def __init__(self, scope: dict, receive: Any, deadline: float) -> None:
        self.receive, self.deadline, self._timeout = receive, deadline, 0.0
        self.headers = [(name.lower(), value) for name, value in scope["headers"]]
        self.complete = False  # the whole body read (or there is none)
        lengths = [value for name, value in self.headers if name == b"content-length"]
        self.chunked = any(name == b"transfer-encoding" for name, _ in self.headers)
        # h11 has checked it: digits, and one value however often it is repeated
        self.length = int(lengths[0]) if lengths else None
        if self.length == 0 or (self.length is None and not self.chunked):
            self.complete = True
        self.expects_continue = any(name == b"expect" and value.lower() == b"100-continue"
                                    for name, value in self.headers)

    async def _next(self) -> bytes:
        import anyio

        left = self.deadline - time.monotonic()
        try:
            with anyio.fail_after(max(left, 0.0)):
                message = await self.receive()
        except TimeoutError:
            raise RequestError(408, f"the request body did not arrive within {self._timeout:g} s") from None
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client went away")
        if not message.get("more_body", False):
            self.complete = True
        return message.get("body", b"")

    async def read(self, limit: int, timeout: float) -> bytes:
        """The body, or RequestError 408 (not arrived in time) or 413 (over ``limit`` bytes)."""
        self._timeout = timeout
        chunks, size = [], 0
        while not self.complete:
            chunk = await self._next()
            size += len(chunk)
            if size > limit:
                raise RequestError(413, _too_large(self.length or size, limit))
            chunks.append(chunk)
        return b"".join(chunks)

    async def drain(self, timeout: float) -> None:
        """Read and drop what is left of a refused request's body (at most ``DRAIN_LIMIT`` bytes, by the deadline),
        so that the answer is not lost to a reset; a body announced with ``Expect: 100-continue`` is not asked for."""
        self._timeout = timeout
        if self.complete or self.expects_continue or (self.length or 0) > DRAIN_LIMIT:
            return
        size = 0
        try:
            while not self.complete and size <= DRAIN_LIMIT:
                size += len(await self._next())
        except (RequestError, ConnectionResetError):
            pass


class _ShutdownLog(logging.Filter):
    """uvicorn's words for the requests it cuts off at shutdown (their tasks cancelled once the grace has run out),
    as one line: its "Cancel N running task(s)" said in r2med's words, the CancelledError traceback of each cut-off
    request ("Exception in ASGI application") left out. Every other record passes as it is."""

    def __init__(self, config: Any) -> None:
        super().__init__("uvicorn.error")
        self.config = config

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Exception in ASGI application\n" and record.exc_info \
                and isinstance(record.exc_info[1], asyncio.CancelledError):
            return False
        if isinstance(record.msg, str) and record.msg.startswith("Cancel %s running task(s)"):
            record.msg = "stopping: %s request(s) still in progress after the %g s grace were cut off"
            record.args = (record.args[0] if record.args else "?", self.config.timeout_graceful_shutdown)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class _App:
    """The ASGI application: Starlette's routing over :class:`RetrievalServer`'s two endpoints, every answer JSON."""

    def __init__(self, server: RetrievalServer) -> None:
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.routing import Route

        self.server = server
        self.entries = CorpusEntries(server.searcher.documents)
        self.bound = ResponseBound(server.searcher.documents, server.max_top_k, self.entries.sizes)
        self._limiter: Any = None  # an anyio.CapacityLimiter, made on the event loop
        routes = [Route("/retrieve", self._retrieve, methods=list(ROUTES["/retrieve"])),
                  Route("/health", self._health, methods=list(ROUTES["/health"]))]
        self.starlette = Starlette(routes=routes, exception_handlers={HTTPException: self._http_error})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not served
            return
        scope["r2med.body"] = _Body(scope, receive, time.monotonic() + self.server.body_timeout)
        await self.starlette(scope, receive, send)

    async def _answer(self, request: Any, status: int, obj: Any, headers: dict[str, str] | None = None) -> Any:
        from starlette.responses import Response

        body = request.scope["r2med.body"]
        headers = dict(headers or {})
        if status >= 400 and not body.complete:
            await body.drain(self.server.body_timeout)
            if not body.complete:  # what is left would be read as the next request: close instead
                headers["Connection"] = "close"
        content = obj if isinstance(obj, bytes) else json.dumps(obj, ensure_ascii=False).encode("utf-8")
        return Response(content, status_code=status, headers=headers, media_type="application/json")

    async def _http_error(self, request: Any, exc: Any) -> Any:
        """Starlette's own refusals (404 no such path, 405 another method) as JSON."""
        path = request.url.path
        if exc.status_code == 404:
            return await self._answer(request, 404, {"error": f"no such path: {path}; this server answers POST "
                                                              "/retrieve and GET /health"})
        if exc.status_code == 405:
            allowed = ROUTES[path]
            return await self._answer(request, 405, {"error": f"{path} answers {allowed[0]} only, not "
                                                              f"{request.method}"},
                                      {"Allow": ", ".join(allowed)})
        return await self._answer(request, exc.status_code, {"error": str(exc.detail)})

    async def _health(self, request: Any) -> Any:
        return await self._answer(request, 200, self.server.health())

    async def _retrieve(self, request: Any) -> Any:
        import anyio

        server, body = self.server, request.scope["r2med.body"]
        try:
            if body.length is None and not body.chunked:
                raise RequestError(411, "a request body needs a Content-Length header (or a chunked body)")
            if body.length is not None and body.length > server.max_body:
                raise RequestError(413, _too_large(body.length, server.max_body))
            payload = decode_body(await body.read(server.max_body, server.body_timeout))
            queries, topk, return_scores = parse_request(payload, default_top_k=server.default_top_k,
                                                         max_top_k=server.max_top_k, max_queries=server.max_queries)
            self.bound.check(len(queries), topk, server.max_response)  # before searching
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(server.max_searches)
            answer = await anyio.to_thread.run_sync(self._search, queries, topk, return_scores,
                                                    limiter=self._limiter)
        except RequestError as exc:
            headers = {"Connection": "close"} if exc.status == 408 else None
            return await self._answer(request, exc.status, {"error": exc.message}, headers)
        except ConnectionResetError:  # the client went away: nobody to answer
            return await self._answer(request, 400, {"error": "the client closed the connection"},
                                      {"Connection": "close"})
        except Exception as exc:  # a failed search: the server goes on
            logger.exception("POST /retrieve failed")
            return await self._answer(request, 500, {"error": f"the search failed: {type(exc).__name__}: {exc}"})
        from starlette.responses import StreamingResponse

        # streamed: each piece is made (in a worker thread) when the connection has taken the one before, so a client
        # that does not read holds a piece and the hits, not the answer (r2med.agent.retrieve_stream)
        return StreamingResponse(answer.chunks(), status_code=200, headers={"Content-Length": str(answer.length)},
                                 media_type="application/json")

    def _search(self, queries: list[str], topk: int, return_scores: bool) -> StreamedAnswer:
        """The answer, searched and measured (in a worker thread: CPU work); its bytes are made as they are sent."""
        hits = search_hits(self.server.searcher, self.entries, queries, topk)
        return StreamedAnswer(self.entries, hits, return_scores)


class RetrievalServer:
    """Search-R1's ``POST /retrieve`` (and ``GET /health``) over ``searcher``, on ``host:port``.

    ``port`` 0 takes any free port (see :attr:`url` once bound). ``default_top_k``: the ``topk`` of a request
    that gives none (or 0); a request may ask for up to ``max_top_k``; ``max_body``: the largest request body in
    bytes; ``max_queries``: the most queries in one request; ``max_response``: the most bytes an answer may take
    (checked before searching); ``body_timeout``: seconds a body may take to arrive; ``max_searches``: searches
    at once; ``max_connections``: connections at once (past them 503). Use :meth:`start` / :meth:`stop` (or
    ``with``) to serve from a background thread, or :meth:`serve_forever` to serve in this one until interrupted::

        searcher = open_searcher(make_retriever("bm25", cache_dir=None), load_corpus("kb/"), source="kb/")
        with RetrievalServer(searcher, port=0) as server:
            requests.post(server.retrieve_url, json={"queries": ["aspirin"], "topk": 3, "return_scores": True})
    """

    def __init__(self, searcher: CorpusSearcher, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 default_top_k: int = DEFAULT_TOP_K, max_body: int = MAX_BODY, max_queries: int = MAX_QUERIES,
                 max_top_k: int = MAX_TOP_K, max_response: int = MAX_RESPONSE, body_timeout: float = BODY_TIMEOUT,
                 max_searches: int = MAX_SEARCHES, max_connections: int = MAX_CONNECTIONS) -> None:
        check_options(port=port, default_top_k=default_top_k, max_top_k=max_top_k, max_body=max_body,
                      max_queries=max_queries, max_response=max_response, body_timeout=body_timeout,
                      max_searches=max_searches, max_connections=max_connections)
        require_extra()
        self.searcher = searcher
        self.host, self.port = host, port
        self.default_top_k, self.max_top_k = default_top_k, max_top_k
        self.max_body, self.max_queries, self.max_response = max_body, max_queries, max_response
        self.body_timeout, self.max_searches, self.max_connections = body_timeout, max_searches, max_connections
        self._socket: socket.socket | None = None
        self._uvicorn: Any = None  # the uvicorn.Server serving now
        self._thread: threading.Thread | None = None
        self._app: _App | None = None
        self._lock = threading.Lock()

    # -- addresses ---------------------------------------------------------------------------------------------

    @property
    def bound_port(self) -> int:
        """The port listened on (the one it got when ``port`` was 0)."""
        if self._socket is None:
            raise UsageError("the retrieval server is not listening yet: call bind(), start() or serve_forever()")
        return int(self._socket.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound server (the port it got when ``port`` was 0)."""
        port = self.bound_port
        host = self.host or "0.0.0.0"
        return f"http://[{host.strip('[]')}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def retrieve_url(self) -> str:
        return f"{self.url}/retrieve"

    def bind(self) -> str:
        """Listen on ``host:port`` now (no request is answered before :meth:`start` or :meth:`serve_forever`);
        returns :attr:`retrieve_url`. UsageError (exit 2) for a host or port that cannot be used, ProviderError
        (exit 6) for a port another process holds."""
        if self._socket is not None:
            return self.retrieve_url
        host = self.host.strip("[]")
        where = f"{self.host or '0.0.0.0'}:{self.port}"
        try:
            family = socket.getaddrinfo(host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            sock = socket.socket(family, socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise UsageError(f"cannot listen on {where}: the host is not an address of this machine ({exc.strerror}); "
                             f"use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, self.port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                raise ProviderError(f"cannot listen on {where}: {reason} (another server is there); pick another "
                                    "port (r2med serve --port; 0 takes any free one)") from None
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM):
                raise UsageError(f"cannot listen on {where}: {reason}; use a host of this machine (127.0.0.1) and a "
                                 "port above 1023") from None
            raise ProviderError(f"cannot listen on {where}: {reason}") from None
        sock.setblocking(False)
        self._socket = sock
        if not is_loopback(self.host):
            logger.warning("serving on %s, which other machines can reach: anyone who can connect can search %s "
                           "(no authentication, no TLS); --host 127.0.0.1 keeps it on this machine",
                           where, self.searcher.corpus)
        logger.info("listening on %s", self.url)
        return self.retrieve_url

    # -- serving -----------------------------------------------------------------------------------------------

    def _make_server(self, grace: float) -> Any:
        uvicorn, _ = require_extra()
        if self._app is None:
            self._app = _App(self)
        config = uvicorn.Config(self._app, http="h11", loop="asyncio", ws="none", lifespan="off", interface="asgi3",
                                log_config=None, access_log=False, server_header=False,
                                headers=[("Server", "r2med-serve")], timeout_keep_alive=int(max(1, self.body_timeout)),
                                limit_concurrency=self.max_connections, timeout_graceful_shutdown=grace)
        return uvicorn.Server(config)

    def start(self) -> str:
        """Serve from a background thread; returns :attr:`retrieve_url` once requests are answered."""
        url = self.bind()
        with self._lock:
            if self._thread is None:
                server = self._uvicorn = self._make_server(SHUTDOWN_GRACE)
                self._thread = threading.Thread(target=self._run, args=(server,), name=f"r2med-serve:{self.url}",
                                                daemon=True)
                self._thread.start()
                while not server.started and self._thread.is_alive():
                    time.sleep(0.01)
        return url

    def _run(self, server: Any) -> None:
        assert self._socket is not None
        uvicorn_log, quiet = logging.getLogger("uvicorn.error"), _ShutdownLog(server.config)
        uvicorn_log.addFilter(quiet)  # a request cut off at shutdown: one line, not a traceback
        try:
            asyncio.run(server.serve(sockets=[self._socket]))
        finally:
            uvicorn_log.removeFilter(quiet)

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (from another thread) or an interrupt (Ctrl-C, and SIGTERM in
        the ``r2med`` command), which this re-raises after closing: requests in progress get
        ``SHUTDOWN_GRACE`` seconds to finish (uvicorn's graceful shutdown)."""
        self.bind()
        with self._lock:
            server = self._uvicorn = self._make_server(SHUTDOWN_GRACE)
        try:
            self._run(server)  # uvicorn re-raises the SIGINT / SIGTERM it caught once it has shut down
        finally:
            self._close()
        # ... but a re-raised SIGINT reaches asyncio.run's own handler, which only cancels the main task: when the task
        # ends before it sees the cancellation, asyncio.run returns as if stop() had been called. Say it was an interrupt.
        if getattr(server, "_captured_signals", None):
            raise KeyboardInterrupt

    def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop accepting connections, give requests in progress ``grace`` seconds, close. Safe to call twice."""
        with self._lock:
            server, thread = self._uvicorn, self._thread
        if server is not None:
            server.config.timeout_graceful_shutdown = grace
            server.should_exit = True
        if thread is not None:
            thread.join()
            self._thread = None
        elif server is not None:  # serve_forever in another thread: it closes when it returns
            deadline = time.monotonic() + grace + 5
            while self._socket is not None and time.monotonic() < deadline:
                time.sleep(0.02)
        self._close()

    def _close(self) -> None:
        with self._lock:
            self._uvicorn = None
            if self._socket is not None:
                self._socket.close()
                self._socket = None

    def __enter__(self) -> RetrievalServer:  # noqa: PYI034 - typing.Self needs Python 3.11
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` answers."""
        return {"status": "ok", "corpus": self.searcher.corpus, "source": self.searcher.source,
                "retriever": self.searcher.retriever, "documents": len(self.searcher.documents),
                "topk": self.default_top_k, "max_topk": self.max_top_k, "max_queries": self.max_queries,
                "max_body": self.max_body, "max_response": self.max_response}
