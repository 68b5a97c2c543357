"""An OpenAI-compatible server on loopback whose URL picks how it misbehaves: ``{base}/<behaviour>/v1``.

Chat (``/chat/completions``), completions (``/completions``) and embeddings (``/embeddings``) are answered alike, and
a GET of any path (a file download) with the completion's body.
``recovered = True`` makes every behaviour answer well (a server that came back). Requests are recorded by
``(path, prompt)`` with the outcome, so a test can check what a rerun sends again.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BEHAVIOURS = ("slow", "trickle", "endless", "empty", "huge", "bad-utf8", "bad-json", "no-choices", "429", "500",
              "echo-200", "echo-401", "surrogate")
#: an answer holding a lone surrogate (half an emoji, as real models emit)
SURROGATE = "half an emoji \ud83d here"


def _prompt(body: dict[str, Any]) -> str:
    if "messages" in body:
        return str(body["messages"][-1].get("content", ""))
    if "prompt" in body:
        return str(body["prompt"])
    return json.dumps(body.get("input"))


def _answer(path: str, body: dict[str, Any], content: str) -> dict[str, Any]:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    if path.endswith("/tokenize"):  # one token per character, as llama.cpp's and vLLM's /tokenize answer
        return {"tokens": [ord(c) for c in str(body.get("content", ""))]}
    if path.endswith("/detokenize"):
        return {"content": "".join(chr(t) for t in body.get("tokens", []))}
    if path.endswith("/embeddings"):
        inputs = body.get("input") or []
        inputs = [inputs] if isinstance(inputs, str) else inputs
        return {"data": [{"index": i, "embedding": [1.0, float(len(str(t)) % 7), 0.5, 0.25]} for i, t in enumerate(inputs)],
                "usage": usage}
    if path.endswith("/chat/completions"):
        return {"choices": [{"message": {"content": content}, "finish_reason": "stop"}], "usage": usage}
    return {"choices": [{"text": content, "finish_reason": "stop"}], "usage": usage}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        parts = self.path.strip("/").split("/")  # <behaviour>/v1/<endpoint...>
        behaviour, path = parts[0], "/" + "/".join(parts[1:])
        owner = self.server.owner
        behaviour = "ok" if owner.recovered else behaviour
        with owner.lock:
            owner.requests[(path, _prompt(body))] += 1
            owner.log.append((behaviour, path))
        auth = self.headers.get("Authorization", "")
        good = _answer(path, body, SURROGATE if behaviour == "surrogate" else owner.content(path))
        try:
            getattr(self, "_" + behaviour.replace("-", "_"))(good, auth)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST  # a file download (``r2med.http.download``): the same behaviours

    def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _ok(self, good: dict, auth: str) -> None:
        self._send(200, json.dumps(good).encode())

    def _slow(self, good: dict, auth: str) -> None:
        self.server.owner.stopped.wait(self.server.owner.slow_s)
        self._ok(good, auth)

    def _trickle(self, good: dict, auth: str) -> None:  # a byte every 0.2 s of an answer that never completes
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        while not self.server.owner.stopped.wait(0.2):
            self.wfile.write(b" ")
            self.wfile.flush()

    def _endless(self, good: dict, auth: str) -> None:  # chunks as fast as it can, for ever
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
        while not self.server.owner.stopped.is_set():
            self.wfile.write(chunk)
            time.sleep(0.001)

    def _empty(self, good: dict, auth: str) -> None:
        self._send(200, b"")

    def _huge(self, good: dict, auth: str) -> None:
        self._send(200, b'{"pad": "' + b"x" * self.server.owner.huge_bytes + b'"}')

    def _bad_utf8(self, good: dict, auth: str) -> None:
        self._send(200, b'\xff\xfe{"choices": \x80}')

    def _bad_json(self, good: dict, auth: str) -> None:
        self._send(200, b'{"choices": [')

    def _no_choices(self, good: dict, auth: str) -> None:
        self._send(200, b'{"choices": []}')

    def _429(self, good: dict, auth: str) -> None:
        self._send(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0"})

    def _500(self, good: dict, auth: str) -> None:
        self._send(500, b'{"error": {"message": "internal"}}')

    def _echo_200(self, good: dict, auth: str) -> None:
        self._send(200, json.dumps({"proxy": {"headers": {"Authorization": auth}}}).encode())

    def _echo_401(self, good: dict, auth: str) -> None:
        self._send(401, json.dumps({"error": {"message": f"bad key: {auth}"}}).encode())

    _surrogate = _ok  # json.dumps writes the answer's lone surrogate as the escape \ud83d


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HostileServer

    def handle_error(self, request: Any, client_address: Any) -> None:  # a client that hung up: nothing to report
        pass


class HostileServer:
    """``with HostileServer(content=...) as s: s.url("trickle")`` -> ``http://127.0.0.1:PORT/trickle/v1``."""

    def __init__(self, content: Any = "<answer>aspirin</answer>", *, slow_s: float = 30.0,
                 huge_bytes: int = 3 * 2**20) -> None:
        self._content = content
        self.slow_s = slow_s
        self.huge_bytes = huge_bytes
        self.recovered = False
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.log: list[tuple[str, str]] = []
        self._http = _Server(("127.0.0.1", 0), _Handler)
        self._http.owner = self

    def content(self, path: str) -> str:
        return self._content(path) if callable(self._content) else self._content

    def url(self, behaviour: str) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/{behaviour}/v1"

    def __enter__(self) -> HostileServer:  # noqa: PYI034 - typing.Self needs Python 3.11
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._http.shutdown()
        self._http.server_close()
