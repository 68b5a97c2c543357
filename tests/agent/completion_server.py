"""A scripted OpenAI-compatible text-completion server for agent tests: ``POST /v1/completions`` on 127.0.0.1.

Deterministic: for a prompt it finds the question (Search-R1's "Question: ...?\\n", Search-o1's
"Question:\\n...\\n\\n"), counts the results already injected, and writes the next turn of a script: the
question's searches (``searches_for``) one per turn, then the answer (``answer_for``). Like a real server it
applies the request's ``stop`` strings: the text is cut before the first one and ``finish_reason`` is "stop"
(so a client that sends no stop string gets the hallucinated continuation after the tag). A Search-o1
Reason-in-Documents prompt is answered with ``condensed_for(query)`` after a "**Final Information**" line.

Markers in a question change the script: ``FAIL-ME`` -> HTTP 400; ``NEVER-CLOSE`` -> an unclosed search tag until
max_tokens ("length"); ``REPEAT`` -> the same search every turn; ``GARBAGE`` -> text without any tag; ``EMPTY`` ->
an empty search query. ``latency`` delays every answer. ``requests`` records every completion body received.
``POST /tokenize`` and ``/detokenize`` (vLLM's bodies) tokenize one token per character (plus one
beginning-of-sequence token, id 1, with ``add_special_tokens``, as vLLM's for a Llama model).

``max_model_len`` makes it a vLLM that enforces its context: ``GET /v1/models`` names it (as vLLM's
``max_model_len``), and a completion whose prompt tokens (BOS included) + ``max_tokens`` pass it gets vLLM's HTTP 400.
Without it ``GET`` answers 404, as a server that says nothing about its context (``tell_context=False`` keeps
the limit but hides it); ``refused`` records the tokens of every request refused so. ``tokenize=False``: no
``/tokenize`` (404), as a server that is neither vLLM nor llama.cpp.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

R1_QUESTION = re.compile(r"Question: (.*?)\n", re.DOTALL)
O1_QUESTION = re.compile(r"Question:\n(.*?)\n\n", re.DOTALL)


def searches_for(question: str) -> list[str]:
    """The searches the scripted model makes for ``question``: its first three words, then its last three."""
    words = question.rstrip("?").split()
    return [" ".join(words[:3]), " ".join(words[-3:])]


def answer_for(question: str) -> str:
    return f"The evidence on {question.rstrip('?')}"


def condensed_for(query: str) -> str:
    return f"Condensed facts about {query}."


def words(text: str) -> int:
    return max(1, len(text.split()))


class CompletionServer:
    def __init__(self, *, latency: float = 0.0, max_model_len: int | None = None, tell_context: bool = True,
                 tokenize: bool = True, port: int = 0) -> None:
        self.latency = latency
        self.tokenize = tokenize
        self.max_model_len = max_model_len
        self.tell_context = tell_context
        self.refused: list[int] = []
        self.requests: list[dict[str, Any]] = []
        self.tokenize_calls = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models" and server.max_model_len and server.tell_context:
                    self._send(200, {"object": "list", "data": [{"id": "test-model", "object": "model",
                                                                 "max_model_len": server.max_model_len}]})
                else:
                    self._send(404, {"error": {"message": f"no {self.path}", "type": "NotFoundError"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if self.path in ("/tokenize", "/detokenize") and not server.tokenize:
                    status, payload = 404, {"error": {"message": f"no {self.path}"}}
                elif self.path in ("/tokenize", "/detokenize"):  # vLLM's shape; one token per character
                    with server._lock:
                        server.tokenize_calls += 1
                    bos = [1] if body.get("add_special_tokens") else []
                    status, payload = 200, ({"tokens": bos + [ord(c) for c in body["prompt"]]} if self.path == "/tokenize"
                                            else {"prompt": "".join(chr(t) for t in body["tokens"])})
                else:
                    with server._lock:
                        server.requests.append(body)
                    if server.latency:
                        time.sleep(server.latency)
                    status, payload = server.answer(body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> CompletionServer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the script
    def intended(self, prompt: str) -> tuple[str, str]:
        """The full text the scripted model would write for ``prompt`` (before stop strings) and its finish."""
        if "**Task Instruction:**" in prompt:
            query = re.search(r'based on the current search query "(.*?)" and previous', prompt, re.DOTALL).group(1)
            return f"Page 1 is relevant.\n**Final Information**\n\n{condensed_for(query)}", "stop"
        o1 = "<|begin_search_query|> your query here" in prompt
        match = (O1_QUESTION if o1 else R1_QUESTION).findall(prompt)
        question = match[-1] if match else ""
        if o1:
            done = prompt.count("<|end_search_result|>") - 1  # the instruction names the token once
        else:
            done = prompt.count("<information>") - 1  # (an observation cut to its first tokens loses its close)
        plan = searches_for(question)
        if "NEVER-CLOSE" in question:
            return (f"<search> {plan[0]} and more" if not o1 else f"<|begin_search_query|>{plan[0]} and more"), "length"
        if "GARBAGE" in question:
            return "zxq ### ((( no tags at all", "stop"
        if "EMPTY" in question:
            return ("<search>   </search> trailing" if not o1 else "<|begin_search_query|> <|end_search_query|> x"), "stop"
        if "REPEAT" in question:
            plan = [plan[0]] * 20
        if done < len(plan):
            query = plan[done]
            if o1:
                return (f"I should look this up.\n<|begin_search_query|>{query}<|end_search_query|>\n\n"
                        "<|begin_search_result|>hallucinated<|end_search_result|>"), "stop"
            return (f"<think> I need to find {query}. </think>\n<search> {query} </search>\n"
                    "<information>hallucinated</information>"), "stop"
        if o1:
            return f"Now I can answer.</think>\n\n{answer_for(question)}", "stop"
        return f"<think> I know enough. </think>\n<answer> {answer_for(question)} </answer>", "stop"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prompt = body.get("prompt", "")
        if self.max_model_len is not None:  # vLLM's check (BOS + one token per character)
            asked = len(prompt) + 1 + int(body.get("max_tokens") or 0)
            if asked > self.max_model_len:
                with self._lock:
                    self.refused.append(asked)
                return 400, {"object": "error", "type": "BadRequestError", "code": 400, "message": (
                    f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                    f"{asked} tokens ({len(prompt) + 1} in the messages, {body.get('max_tokens')} in the completion). "
                    "Please reduce the length of the messages or completion.")}
        if "FAIL-ME" in prompt and "**Task Instruction:**" not in prompt:
            return 400, {"error": {"message": "scripted failure", "type": "invalid_request_error"}}
        text, finish = self.intended(prompt)
        stopped = None
        for stop in body.get("stop") or []:
            at = text.find(stop)
            if at >= 0 and (stopped is None or at < stopped[0]):
                stopped = (at, stop)
        if stopped is not None:
            text, finish = text[: stopped[0]], "stop"
        return 200, {
            "id": "cmpl-test", "object": "text_completion", "created": 0, "model": body.get("model", ""),
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": words(prompt), "completion_tokens": words(text),
                      "total_tokens": words(prompt) + words(text)},
        }
