"""A scripted OpenAI-compatible ``POST /v1/completions`` server on loopback that answers with known logprobs.

``answers`` maps a prompt to ``(text, finish_reason, last_top)``: the completion's text and the top logprobs of its
last position (``{token: logprob}``). ``style`` is the logprobs form: ``"openai"`` (vLLM's completions form) or
``"llamacpp"`` (the chat form llama.cpp sends). Every request body is recorded in ``bodies``. A prompt of token ids
is looked up as a tuple. ``usage(prompt, text) -> (prompt_tokens, completion_tokens)`` is what each answer says it
used (default: 10 and 2).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class CompletionsServer:
    def __init__(self, answers: dict[Any, tuple[str, str, dict[str, float]]], *, style: str = "openai",
                 usage: Callable[[Any, str], tuple[int, int]] = lambda prompt, text: (10, 2)) -> None:
        self.answers = answers
        self.style = style
        self.usage = usage
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                server.bodies.append(body)
                prompt = body.get("prompt")
                prompt = tuple(prompt) if isinstance(prompt, list) else prompt
                if self.path != "/v1/completions" or prompt not in server.answers:
                    data, status = json.dumps({"error": {"message": f"unknown prompt {body.get('prompt')!r}"}}), 400
                else:
                    data, status = json.dumps(server.answer(*server.answers[prompt], prompt=prompt)), 200
                raw = data.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def answer(self, text: str, finish: str, last: dict[str, float], *, prompt: Any = "") -> dict[str, Any]:
        earlier = {"x": -0.5, "y": -1.5}  # an earlier position: never the one scored
        if self.style == "openai":
            logprobs: dict[str, Any] = {"tokens": ["x", "t"], "token_logprobs": [-0.5, -0.1],
                                        "top_logprobs": [earlier, dict(last)], "text_offset": [0, 1]}
        else:
            logprobs = {"content": [{"token": t, "logprob": lp, "top_logprobs": [{"token": k, "logprob": v}
                                                                              for k, v in top.items()]}
                                    for t, lp, top in (("x", -0.5, earlier), ("t", -0.1, last))]}
        return {"choices": [{"text": text, "index": 0, "finish_reason": finish, "logprobs": logprobs}],
                "usage": dict(zip(("prompt_tokens", "completion_tokens"), self.usage(prompt, text)))}

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CountingProxy:
    """Forwards every POST to ``upstream`` (a real server) and records each request body as it arrives (``bodies``),
    and each answer's path, body and ``usage`` as it goes back (``answers``: ``(path, body, usage)``)."""

    def __init__(self, upstream: str) -> None:
        import urllib.request

        self.bodies: list[dict[str, Any]] = []
        self.answers: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    proxy.bodies.append(json.loads(data))
                request = urllib.request.Request(upstream + self.path, data=data,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=300) as response:
                    status, answer = response.status, response.read()
                with lock:
                    proxy.answers.append((self.path, json.loads(data), json.loads(answer).get("usage") or {}))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):  # the client was killed meanwhile
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
