"""A local OpenAI-compatible chat server for tests: ``POST /v1/chat/completions`` on 127.0.0.1.

Runs a real HTTP server (stdlib ``http.server``) in a background thread on a free loopback port.
A normal answer is deterministic: ``content = reply_for(last user message)`` and the usage counts
whitespace words (``usage_tokens``). Faults are scripted per prompt and consumed one per request
for that prompt, in order, so that concurrent clients still meet exactly the scripted faults::

    with ChatServer() as server:
        server.script("q1", Status(429, retry_after="0"), Status(500), Garbage(), Empty())
        ...  # the first four requests for prompt "q1" fail, the fifth is answered
        server.requests  # [Recorded(prompt="q1", outcome="429", ...), ...]

``latency`` delays every answer (to measure concurrency); ``Hang(seconds)`` outlasts a client's
timeout. ``stop`` (or leaving the ``with``) shuts the server and wakes any sleeping request.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = "/v1/chat/completions"


def reply_for(prompt: str) -> str:
    """The text the server answers ``prompt`` with."""
    return f"A passage about {prompt}."


def usage_tokens(text: str) -> int:
    """Tokens the server bills for ``text``: whitespace words, at least 1."""
    return max(1, len(text.split()))


@dataclass(frozen=True)
class Status:
    """Answer with HTTP ``status`` (an OpenAI-shaped error body), optionally with ``Retry-After``."""

    status: int
    retry_after: str | None = None
    message: str = "scripted failure"


@dataclass(frozen=True)
class Hang:
    """Sleep ``seconds`` before answering normally (outlasts a client's timeout)."""

    seconds: float


@dataclass(frozen=True)
class Garbage:
    """HTTP 200 whose body is not JSON."""


@dataclass(frozen=True)
class Empty:
    """HTTP 200 with a choice whose content is empty."""


@dataclass(frozen=True)
class NoChoices:
    """HTTP 200 with ``"choices": []``."""


@dataclass(frozen=True)
class Reply:
    """HTTP 200 answering ``content`` (and ``reasoning_content``) with ``finish_reason``."""

    content: str
    reasoning_content: str | None = None
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Recorded:
    prompt: str
    outcome: str
    body: dict[str, Any] = field(compare=False)
    at: float = field(compare=False)


def _last_user(body: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
    return users[-1] if users else ""


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # listen backlog: many clients connect at once (the default 5 drops SYNs: 1 s stalls)
    daemon_threads = True


class ChatServer:
    """The server; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, *, latency: float = 0.0) -> None:
        self.latency = latency
        self.requests: list[Recorded] = []
        self._scripts: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != PATH:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                server._answer(self, body)

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, prompt: str, *faults: Any) -> None:
        """Queue ``faults`` for the next requests whose last user message is ``prompt``."""
        with self._lock:
            self._scripts.setdefault(prompt, []).extend(faults)

    def count(self, prompt: str | None = None, outcome: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if (prompt is None or r.prompt == prompt)
                       and (outcome is None or r.outcome == outcome))

    def _answer(self, handler: Any, body: dict[str, Any]) -> None:
        prompt = _last_user(body)
        with self._lock:
            queue = self._scripts.get(prompt) or []
            fault = queue.pop(0) if queue else None
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            status, payload, headers, outcome = self._respond(body, prompt, fault)
            with self._lock:  # recorded before the answer goes out: a client that has it finds it recorded
                self.requests.append(Recorded(prompt, outcome, body, time.monotonic()))
            handler._send(status, payload, headers)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _respond(self, body: dict[str, Any], prompt: str, fault: Any) -> tuple[int, Any, dict[str, str] | None, str]:
        """``(status, payload, headers, outcome)`` of the answer to send."""
        if self.latency:
            self._stopping.wait(self.latency)
        if isinstance(fault, Status):
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            return fault.status, {"error": {"message": fault.message, "type": "scripted"}}, headers, str(fault.status)
        if isinstance(fault, Garbage):
            return 200, b"<html>not json at all", None, "garbage"
        if isinstance(fault, Hang):
            self._stopping.wait(fault.seconds)
            outcome = "hang"
        else:
            outcome = "ok"
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": reply_for(prompt)}}
        if isinstance(fault, Empty):
            choice["message"]["content"] = ""
            outcome = "empty"
        if isinstance(fault, Reply):
            choice["message"]["content"] = fault.content
            if fault.reasoning_content is not None:
                choice["message"]["reasoning_content"] = fault.reasoning_content
            choice["finish_reason"] = fault.finish_reason
        content = choice["message"]["content"] or ""
        payload = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
            "choices": [] if isinstance(fault, NoChoices) else [choice],
            "usage": {"prompt_tokens": usage_tokens(prompt), "completion_tokens": usage_tokens(content),
                      "total_tokens": usage_tokens(prompt) + usage_tokens(content)},
        }
        return 200, payload, None, "nochoices" if isinstance(fault, NoChoices) else outcome

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):  # -> ChatServer
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
