"""A local embedding API for tests: OpenAI-compatible (and Voyage-shaped) ``POST /v1/embeddings``.

Runs a real HTTP server on 127.0.0.1 (a free port) in a background thread. Each input text gets a
deterministic unit vector (``expected_embedding``), the answer lists the embeddings in reverse
order (clients must sort by ``index``), and every request is recorded. Failures are queued and
consumed one per request, in order::

    with EmbeddingServer(dim=8) as server:
        server.enqueue(Fail(429, retry_after="0.05"), Fail(503))
        ...  # the client's next two requests fail, the third succeeds
        server.requests  # [Recorded(...), ...]

Only loopback is ever bound, and ``stop`` (or leaving the ``with``) shuts the server and wakes any
request that is still sleeping.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

PATH = "/v1/embeddings"


def expected_embedding(text: str, dim: int) -> np.ndarray:
    """The unit float64 vector the server returns for ``text``: seeded by the text's sha256."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim)
    return vector / np.linalg.norm(vector)


def usage_tokens(text: str) -> int:
    """The token count the server bills for ``text`` (whitespace words, at least 1)."""
    return max(1, len(text.split()))


@dataclass(frozen=True)
class Fail:
    """Answer with HTTP ``status`` and ``body`` (JSON-encoded unless bytes), optionally with retry headers."""

    status: int
    retry_after: str | None = None
    retry_after_ms: str | None = None
    body: Any = None


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before answering normally (to outlast a client's timeout)."""

    seconds: float


@dataclass(frozen=True)
class Malformed:
    """Answer 200 with a body that is not JSON."""

    body: bytes = b"<html>this is not json"


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering (the client sees a reset/disconnect)."""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)

    @property
    def inputs(self) -> list[str]:
        return list(self.body.get("input", [])) if isinstance(self.body, dict) else []


class EmbeddingServer:
    """See the module docstring. ``api_key``: when set, requests must carry ``Bearer <api_key>``;
    a wrong key gets a 401 whose message echoes what was sent (as careless servers do), so tests
    can check that clients keep it out of their errors. ``scale`` multiplies every vector (1.0:
    unit vectors). ``delay``: seconds every successful request takes, or a function of the
    request's inputs giving them (to make batches finish out of order)."""

    def __init__(
        self,
        *,
        dim: int = 8,
        api_key: str | None = None,
        scale: float = 1.0,
        delay: float | Callable[[list[str]], float] = 0.0,
    ) -> None:
        self.dim = dim
        self.api_key = api_key
        self.scale = scale
        self.delay = delay
        self.requests: list[Recorded] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._actions: list[Fail | Sleep | Malformed | Drop] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control --------------------------------------------------------------------------------

    def start(self) -> EmbeddingServer:
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The base_url to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *actions: Fail | Sleep | Malformed | Drop) -> None:
        with self._lock:
            self._actions.extend(actions)

    def fail(self, status: int, times: int = 1, **kwargs: Any) -> None:
        self.enqueue(*[Fail(status, **kwargs)] * times)

    @property
    def inputs(self) -> list[list[str]]:
        """The ``input`` list of every request, in arrival order."""
        return [r.inputs for r in self.requests]

    # -- serving --------------------------------------------------------------------------------

    def _next_action(self, record: Recorded) -> Fail | Sleep | Malformed | Drop | None:
        with self._lock:
            self.requests.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            return self._actions.pop(0) if self._actions else None

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            return 400, {"error": {"message": "'input' must be a non-empty list of strings", "type": "invalid_request_error"}}
        if any(t == "" for t in inputs):
            return 400, {"error": {"message": "'$.input' is invalid: empty string", "type": "invalid_request_error"}}
        dim = body.get("dimensions") or body.get("output_dimension") or self.dim
        data = [
            {"object": "embedding", "index": i, "embedding": (expected_embedding(t, dim) * self.scale).tolist()}
            for i, t in enumerate(inputs)
        ]
        tokens = sum(usage_tokens(t) for t in inputs)
        voyage = "input_type" in body
        usage = {"total_tokens": tokens} if voyage else {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, {"object": "list", "data": data[::-1], "model": body.get("model"), "usage": usage}


def record_inputs(body: Any) -> list[str]:
    inputs = body.get("input") if isinstance(body, dict) else None
    return [t for t in inputs if isinstance(t, str)] if isinstance(inputs, list) else []


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:  # no tracebacks on stderr
        pass


class _Handler(BaseHTTPRequestHandler):
    owner: EmbeddingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        pass

    def do_POST(self) -> None:
        server = self.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        record = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        action = server._next_action(record)
        self._open = True
        try:
            self._serve(server, body, action)
        except OSError:  # the client gave up (timeout) and closed the socket
            pass
        finally:
            self._finish()

    def _finish(self) -> None:
        # Counted as finished before the answer is written: once the client has the answer it may
        # start its next request, which must not overlap this one in ``max_in_flight``.
        if self._open:
            self._open = False
            self.owner._done()

    def _serve(self, server: EmbeddingServer, body: Any, action: Any) -> None:
        if isinstance(action, Drop):
            self.close_connection = True
            return
        if isinstance(action, Sleep) and server._stopping.wait(action.seconds):
            return
        if isinstance(action, Malformed):
            return self._send(200, action.body)
        if isinstance(action, Fail):
            headers = {}
            if action.retry_after is not None:
                headers["Retry-After"] = action.retry_after
            if action.retry_after_ms is not None:
                headers["retry-after-ms"] = action.retry_after_ms
            payload = action.body if action.body is not None else {"error": {"message": f"injected failure {action.status}"}}
            return self._send(action.status, payload, headers)
        if self.path != PATH:
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if server.api_key is not None:
            sent = self.headers.get("Authorization", "")
            if sent != f"Bearer {server.api_key}":
                message = f"Incorrect API key provided: {sent.removeprefix('Bearer ')}"
                return self._send(401, {"error": {"message": message, "type": "invalid_request_error"}})
        if not isinstance(body, dict):
            return self._send(400, {"error": {"message": "body is not a JSON object"}})
        delay = server.delay(record_inputs(body)) if callable(server.delay) else server.delay
        if delay:
            server._stopping.wait(delay)
        status, payload = server._answer(body)
        self._send(status, payload)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self._finish()
        self.wfile.write(data)
