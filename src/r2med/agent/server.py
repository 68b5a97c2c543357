"""Search-R1's retrieval API over any r2med retriever: ``POST /retrieve`` (``r2med serve``).

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

Refusals are JSON ``{"error": "..."}``: 400 malformed JSON (or a body that is not UTF-8, or a ``topk`` outside
1..``max_top_k``), 422 a well-formed body of the wrong shape or types (as FastAPI answers), 411 no
Content-Length, 413 a body over ``max_body`` bytes or more than ``max_queries`` queries, 404 another path,
405 another method (with ``Allow``), 408 a body that does not arrive within 30 s, 500 a failed search.
Unknown fields are ignored (as pydantic does) and the Content-Type is not checked (``curl -d`` says form data).
Each connection is served by its own thread; searches go through the searcher one at a time, and a request's
repeated query texts are searched once.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import socket
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from r2med.agent.retrieve_api import (
    DEFAULT_TOP_K,
    MAX_QUERIES,
    MAX_TOP_K,
    RequestError,
    parse_request,
    retrieve,
)
from r2med.agent.search import CorpusSearcher
from r2med.errors import ProviderError, UsageError

logger = logging.getLogger(__name__)

#: Search-R1's port (uvicorn on port 8000); the default top k is ``retrieve_api.DEFAULT_TOP_K``
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: the limits of one request (besides the request parsing's ``MAX_TOP_K`` and ``MAX_QUERIES``)
MAX_BODY = 1 << 20
#: seconds a client may take to send a request once connected (and an idle keep-alive connection stays open)
READ_TIMEOUT = 30.0
#: the most bytes of a refused request's body read (and dropped) before the connection is closed: closing with
#: unread bytes resets it, and the client would lose the answer saying why it was refused
DRAIN_LIMIT = 16 << 20
#: seconds :meth:`RetrievalServer.stop` waits for requests in progress before closing
SHUTDOWN_GRACE = 10.0

#: path -> the one method it answers (HEAD goes with GET)
ROUTES = {"/retrieve": "POST", "/health": "GET"}


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


def check_options(*, port: int, default_top_k: int, max_top_k: int, max_body: int, max_queries: int) -> None:
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


def _too_large(length: int, max_body: int) -> str:
    return (f"the request body has {length} bytes; the limit is {max_body} (r2med serve --max-body): send fewer "
            "queries per request")


class _Handler(BaseHTTPRequestHandler):
    """One connection (HTTP/1.1, keep-alive); every answer is JSON."""

    protocol_version = "HTTP/1.1"
    server_version = "r2med-serve"
    sys_version = ""
    timeout = READ_TIMEOUT
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        logger.debug("%s: %s", self.address_string(), format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers too long, ...) as JSON too."""
        self._send_json(code, {"error": message or HTTPStatus(code).phrase}, close=True)

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue`` with a body over the limit: 413 at once, before the client sends it."""
        given = self.headers.get("Content-Length", "").strip()
        if given.isdigit() and int(given) > self.server.app.max_body:
            self._send_json(413, {"error": _too_large(int(given), self.server.app.max_body)}, close=True)
            return False
        return super().handle_expect_100()

    def _send_json(self, status: int, obj: Any, *, close: bool = False, headers: Sequence[tuple[str, str]] = ()) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD" and status >= 200 and status not in (204, 304):
            self.wfile.write(body)

    def _handle(self) -> None:
        app: RetrievalServer = self.server.app
        self._body_read = False
        app._enter()
        try:
            self._route(app)
        except RequestError as exc:
            self._send_json(exc.status, {"error": exc.message}, close=not self._body_read)
            self._discard_body()
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            self.close_connection = True
        except Exception as exc:  # a failed search: the server goes on
            logger.exception("%s %s failed", self.command, self.path)
            self._send_json(500, {"error": f"the search failed: {type(exc).__name__}: {exc}"}, close=True)
        finally:
            app._leave()

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _handle

    def _route(self, app: RetrievalServer) -> None:
        path = urlsplit(self.path).path
        allowed = ROUTES.get(path)
        if allowed is None:
            raise RequestError(404, f"no such path: {path}; this server answers POST /retrieve and GET /health")
        if (self.command if self.command != "HEAD" else "GET") != allowed:
            has_body = self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length", "0").strip() != "0"
            self._send_json(405, {"error": f"{path} answers {allowed} only, not {self.command}"},
                            close=bool(has_body), headers=[("Allow", "GET, HEAD" if allowed == "GET" else allowed)])
            self._discard_body()
            return
        if path == "/health":
            self._send_json(200, app.health())
            return
        payload = self._read_json(app.max_body)
        queries, topk, return_scores = parse_request(payload, default_top_k=app.default_top_k,
                                                     max_top_k=app.max_top_k, max_queries=app.max_queries)
        self._send_json(200, retrieve(app.searcher, queries, topk, return_scores))

    def _discard_body(self) -> None:
        """Read and drop the body of a refused request (up to ``DRAIN_LIMIT`` bytes), so that closing the connection
        does not reset it before the client has read the answer."""
        given = self.headers.get("Content-Length", "").strip()
        if self._body_read or not given.isdigit() or int(given) > DRAIN_LIMIT:
            return
        left = int(given)
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        self._body_read = True

    def _read_json(self, max_body: int) -> Any:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "chunked request bodies are not supported; send the body with a Content-Length")
        given = self.headers.get("Content-Length")
        if given is None:
            raise RequestError(411, "a request body needs a Content-Length header")
        if not given.strip().isdigit():
            raise RequestError(400, f"Content-Length must be a whole number of bytes, got {given!r}")
        length = int(given)
        if length > max_body:
            raise RequestError(413, _too_large(length, max_body))
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise RequestError(408, f"the request body did not arrive within {READ_TIMEOUT:g} s") from None
        if len(body) < length:
            raise RequestError(400, f"the request body ended after {len(body)} of the {length} bytes announced")
        self._body_read = True
        try:
            return json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise RequestError(400, f"the request body is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except RecursionError:
            raise RequestError(400, "the request body is not usable JSON: nested too deeply") from None
        except ValueError as exc:  # json.JSONDecodeError, and integers past Python's digit limit
            raise RequestError(400, f"the request body is not valid JSON: {exc}") from None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a connection left open never blocks the exit; stop() waits for requests in progress
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: RetrievalServer, family: int) -> None:
        self.address_family = family
        self.app = app
        super().__init__(address, _Handler)

    def server_bind(self) -> None:  # HTTPServer's looks up the host's DNS name (slow offline); not needed
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:  # socketserver prints a traceback
        logger.debug("the connection from %s failed", client_address, exc_info=sys.exc_info())


class RetrievalServer:
    """Search-R1's ``POST /retrieve`` (and ``GET /health``) over ``searcher``, on ``host:port``.

    ``port`` 0 takes any free port (see :attr:`url` once bound). ``default_top_k``: the ``topk`` of a request
    that gives none (or 0); a request may ask for up to ``max_top_k``; ``max_body``: the largest request body in
    bytes; ``max_queries``: the most queries in one request. Use :meth:`start` / :meth:`stop` (or ``with``) to
    serve from a background thread, or :meth:`serve_forever` to serve in this one until interrupted::

        searcher = open_searcher(make_retriever("bm25", cache_dir=None), load_corpus("kb/"), source="kb/")
        with RetrievalServer(searcher, port=0) as server:
            requests.post(server.retrieve_url, json={"queries": ["aspirin"], "topk": 3, "return_scores": True})
    """

    def __init__(self, searcher: CorpusSearcher, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 default_top_k: int = DEFAULT_TOP_K, max_body: int = MAX_BODY, max_queries: int = MAX_QUERIES,
                 max_top_k: int = MAX_TOP_K) -> None:
        check_options(port=port, default_top_k=default_top_k, max_top_k=max_top_k, max_body=max_body,
                      max_queries=max_queries)
        self.searcher = searcher
        self.host, self.port = host, port
        self.default_top_k, self.max_top_k = default_top_k, max_top_k
        self.max_body, self.max_queries = max_body, max_queries
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._busy = threading.Condition()
        self._in_flight = 0
        self._closing = threading.Lock()

    # -- addresses ---------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound server (the port it got when ``port`` was 0)."""
        if self._httpd is None:
            raise UsageError("the retrieval server is not listening yet: call bind(), start() or serve_forever()")
        host, port = self._httpd.server_address[:2]
        host = self.host or str(host)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def retrieve_url(self) -> str:
        return f"{self.url}/retrieve"

    def bind(self) -> str:
        """Listen on ``host:port`` now (no request is answered before :meth:`start` or :meth:`serve_forever`);
        returns :attr:`retrieve_url`. UsageError (exit 2) for a host or port that cannot be used, ProviderError
        (exit 6) for a port another process holds."""
        if self._httpd is not None:
            return self.retrieve_url
        host = self.host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        where = f"{self.host or '0.0.0.0'}:{self.port}"
        try:
            self._httpd = _HTTPServer((host, self.port), self, family)
        except socket.gaierror as exc:
            raise UsageError(f"cannot listen on {where}: the host is not an address of this machine ({exc.strerror}); "
                             f"use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                raise ProviderError(f"cannot listen on {where}: {reason} (another server is there); pick another "
                                    "port (r2med serve --port; 0 takes any free one)") from None
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM):
                raise UsageError(f"cannot listen on {where}: {reason}; use a host of this machine (127.0.0.1) and a "
                                 "port above 1023") from None
            raise ProviderError(f"cannot listen on {where}: {reason}") from None
        if not is_loopback(self.host):
            logger.warning("serving on %s, which other machines can reach: anyone who can connect can search %s "
                           "(no authentication, no TLS); --host 127.0.0.1 keeps it on this machine",
                           where, self.searcher.corpus)
        logger.info("listening on %s", self.url)
        return self.retrieve_url

    # -- serving -----------------------------------------------------------------------------------------------

    def start(self) -> str:
        """Serve from a background thread; returns :attr:`retrieve_url`."""
        url = self.bind()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"r2med-serve:{self.url}", daemon=True)
            self._thread.start()
            self._serving.wait()
        return url

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (from another thread) or an interrupt (Ctrl-C, and SIGTERM in
        the ``r2med`` command), which this re-raises after closing: requests in progress get
        ``SHUTDOWN_GRACE`` seconds to finish."""
        self.bind()
        try:
            self._loop()
        finally:
            self._close()

    def _loop(self) -> None:
        assert self._httpd is not None
        self._serving.set()
        try:
            self._httpd.serve_forever(poll_interval=0.2)
        finally:
            self._serving.clear()

    def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop accepting connections, give requests in progress ``grace`` seconds, close. Safe to call twice."""
        httpd = self._httpd
        if httpd is None:
            return
        if self._serving.is_set():
            httpd.shutdown()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._close(grace)

    def _close(self, grace: float = SHUTDOWN_GRACE) -> None:
        with self._closing:
            if self._httpd is None:
                return
            with self._busy:
                if not self._busy.wait_for(lambda: self._in_flight == 0, timeout=grace):
                    logger.warning("closing with %d requests still in progress", self._in_flight)
            self._httpd.server_close()
            self._httpd = None

    def _enter(self) -> None:
        with self._busy:
            self._in_flight += 1

    def _leave(self) -> None:
        with self._busy:
            self._in_flight -= 1
            self._busy.notify_all()

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
                "max_body": self.max_body}
