"""A local OpenAI-compatible chat server for the listwise tests: answers come from a function of the request.

``ListwiseServer(answer)`` serves ``POST /v1/chat/completions`` on a free loopback port in a background
thread. ``answer(query, n, messages)`` gets the window's query (read from RankGPT's closing message),
its number of passages and the messages, and returns the reply: a string (the message content), a
``Reply`` (content plus ``reasoning_content``), or an ``int`` HTTP status to fail with. Every request is
recorded with the passages it showed; ``max_in_flight`` is the most requests answered at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CLOSING = re.compile(r"^Search Query: (.*)\. \nRank the (\d+) passages above", re.DOTALL)
_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.DOTALL)


@dataclass(frozen=True)
class Reply:
    content: str
    reasoning: str | None = None


@dataclass
class Recorded:
    query: str
    passages: list[str]
    messages: list[dict[str, str]]
    status: int


class ListwiseServer:
    def __init__(self, answer: Callable[[str, int, list[dict[str, str]]], Any], *, latency: float = 0.0) -> None:
        self.answer = answer
        self.latency = latency
        self.requests: list[Recorded] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _respond(self, body: dict) -> tuple[int, dict]:
        messages = body["messages"]
        match = _CLOSING.match(messages[-1]["content"])
        if match is None:
            return 400, {"error": {"message": "not a RankGPT prompt"}}
        query, n = match.group(1), int(match.group(2))
        passages = [m["content"] for m in messages if m["role"] == "user" and _PASSAGE.match(m["content"])]
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.latency:
                time.sleep(self.latency)
            reply = self.answer(query, n, messages)
        finally:
            with self._lock:
                self._in_flight -= 1
        status = reply if isinstance(reply, int) else 200
        with self._lock:
            self.requests.append(Recorded(query, passages, messages, status))
        if status != 200:
            return status, {"error": {"message": f"scripted failure {status}"}}
        if isinstance(reply, str):
            reply = Reply(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        return 200, {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10 * n, "completion_tokens": 5, "total_tokens": 10 * n + 5},
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                status, payload = server._respond(json.loads(self.rfile.read(length)))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
