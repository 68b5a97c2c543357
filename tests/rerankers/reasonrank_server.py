"""A local OpenAI-compatible server for the ReasonRank tests: ``POST /v1/completions`` and ``/v1/chat/completions``.

``ReasonRankServer(answer)`` answers each request with ``answer(query, n, body)``: a string (the completion text or
message content), a ``Reply`` (content plus ``reasoning_content``, chat only) or an ``int`` HTTP status. The query
and the number of passages are read from ReasonRank's post prompt ("Search Query: ...\\nRank the n passages above");
every request is recorded with its path, body and the passage lines it showed. Usage: ``10 * n`` prompt tokens and
5 completion tokens per request, so a test can work out the cost line.

What else it serves is what vLLM serves: ``GET /v1/models`` lists ``model`` (with vLLM's ``max_model_len``), ``POST
/tokenize`` and ``/detokenize`` (vLLM's bodies) tokenize one token per character; any other path is a 404, as on a
server that lacks it (``other`` counts those calls).
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

_POST = re.compile(r"Search Query: (.*)\.\nRank the (\d+) passages above")
_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Reply:
    content: str
    reasoning: str | None = None


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    query: str
    passages: list[str]


class ReasonRankServer:
    def __init__(self, answer: Callable[[str, int, dict], Any], *, latency: float = 0.0,
                 model: str = "liuwenhan/reasonrank-32B", max_model_len: int = 32768) -> None:
        self.answer = answer
        self.latency = latency
        self.model = model
        self.max_model_len = max_model_len
        self.other: list[str] = []  # paths answered 404
        self.requests: list[Recorded] = []
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

    def _served(self, method: str, path: str, body: dict) -> tuple[int, dict] | None:
        """vLLM's other endpoints; None for the completions (answered by ``_respond``)."""
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "vllm",
                                                     "max_model_len": self.max_model_len}]}
        if method == "POST" and path == "/tokenize":
            tokens = [ord(c) for c in body.get("prompt", "")]
            return 200, {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens}
        if method == "POST" and path == "/detokenize":
            return 200, {"prompt": "".join(chr(t) for t in body.get("tokens", []))}
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return None
        with self._lock:
            self.other.append(f"{method} {path}")
        return 404, {"object": "error", "message": f"Not Found: {path}", "type": "NotFoundError", "code": 404}

    def _respond(self, path: str, body: dict) -> tuple[int, dict]:
        text = body["prompt"] if path.endswith("/completions") and "prompt" in body else body["messages"][-1]["content"]
        match = _POST.search(text)
        if match is None:
            return 400, {"error": {"message": "not a ReasonRank prompt"}}
        query, n = match.group(1), int(match.group(2))
        passages = [m.group(0) for m in _PASSAGE.finditer(text)]
        if self.latency:
            time.sleep(self.latency)
        reply = self.answer(query, n, body)
        with self._lock:
            self.requests.append(Recorded(path, body, query, passages))
        if isinstance(reply, int):
            return reply, {"error": {"message": f"scripted failure {reply}"}}
        if isinstance(reply, str):
            reply = Reply(reply)
        usage = {"prompt_tokens": 10 * n, "completion_tokens": 5, "total_tokens": 10 * n + 5}
        if "prompt" in body:
            choice: dict[str, Any] = {"index": 0, "text": reply.content, "finish_reason": "stop"}
        else:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.reasoning is not None:
                message["reasoning_content"] = reply.reasoning
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return 200, {"id": "x", "object": "completion", "created": 0, "model": body.get("model", ""),
                     "choices": [choice], "usage": usage}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                status, payload = server._served("GET", self.path, {}) or (404, {})
                self._send(status, payload)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = server._served("POST", self.path, body) or server._respond(self.path, body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
