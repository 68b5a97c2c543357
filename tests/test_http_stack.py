"""One HTTP stack: embeddings, chat and completions meet the same failures from one fake server and behave alike.

Each failure (a refused connection, 429 with Retry-After, 500, a timeout, a key echoed in an error body or in a 200
answer that is no answer) is scripted for the path of each of the three kinds of request, and each kind must show
the same outcome: the same number of attempts and retries, the same wait, the same error with the same exit code,
and the key cut out of every message and log line. The agent's files are checked for the key too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from r2med.errors import MissingResourceError, ProviderError
from r2med.http import FatalProviderError, JsonClient, Retry, RetryPolicy, Secret
from r2med.llm.client import ChatClient, SamplingParams
from r2med.retrievers.dense.api import OpenAIEmbeddings

SECRET = "sk-stack-SECRET-0123456789"
PATHS = {"embeddings": "/v1/embeddings", "chat": "/v1/chat/completions", "completions": "/v1/completions"}
ANSWERS: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"data": [{"index": 0, "embedding": [3.0, 4.0]}], "usage": {"total_tokens": 1}},
    "/v1/chat/completions": {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
    "/v1/completions": {"choices": [{"text": "ok", "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, *args: Any) -> None:  # keep the test output clean
        pass

    def do_POST(self) -> None:
        self.server.stack.answer(self)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    stack: StackServer


class StackServer:
    """Answers the three paths on 127.0.0.1; ``script(path, *faults)`` queues faults for a path's next requests.

    A fault is ``(status, headers, body)``, ``"hang"`` (sleep past the client's timeout, then answer) or ``"echo"``
    (HTTP 200 whose JSON is no answer and echoes the request's Authorization header)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes, str | None]] = []
        self.faults: dict[str, list[Any]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.stack = self
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, request: _Handler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        auth = request.headers.get("Authorization")
        with self.lock:
            self.requests.append((request.path, body, auth))
            queue = self.faults.get(request.path) or []
            fault = queue.pop(0) if queue else None
        status, headers, payload = 200, {}, ANSWERS.get(request.path, {})
        if fault == "hang":
            self.stopping.wait(0.6)
        elif fault == "echo":
            payload = {"object": "echo", "headers": {"authorization": auth}}
        elif fault is not None:
            status, headers, payload = fault
        data = json.dumps(payload).encode()
        try:
            request.send_response(status)
            for key, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
                request.send_header(key, value)
            request.end_headers()
            request.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out
            pass

    def script(self, path: str, *faults: Any) -> None:
        with self.lock:
            self.faults.setdefault(path, []).extend(faults)

    def count(self, path: str) -> int:
        return sum(1 for sent, _, _ in self.requests if sent == path)

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = StackServer()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("R2MED_STACK_KEY", SECRET)


#: the same client settings for the three kinds: 2 retries, a 0.3 s timeout, a backoff of 1-10 ms
RETRIES, TIMEOUT, BACKOFF, MAX_BACKOFF = 2, 0.3, 0.001, 0.01


def embed(base_url: str) -> tuple[Any, dict[str, float]]:
    encoder = OpenAIEmbeddings("m", base_url=base_url, api_key_env="R2MED_STACK_KEY", max_retries=RETRIES,
                               timeout=TIMEOUT, backoff_base=BACKOFF, backoff_max=MAX_BACKOFF)
    try:
        return [round(float(x), 6) for x in encoder.encode(["a"], kind="query")[0]], encoder.stats
    except Exception as exc:
        exc.stats = encoder.stats  # type: ignore[attr-defined]
        raise


def _llm(call: Callable[[ChatClient], Any]) -> Callable[[str], tuple[Any, dict[str, float]]]:
    def run(base_url: str) -> tuple[Any, dict[str, float]]:
        client = ChatClient("m", base_url, api_key_env="R2MED_STACK_KEY", timeout=TIMEOUT, max_retries=RETRIES,
                            backoff=BACKOFF, max_backoff=MAX_BACKOFF)

        async def go() -> Any:
            try:
                return await call(client)
            finally:
                await client.aclose()

        try:
            return asyncio.run(go()).text, client.stats
        except Exception as exc:
            exc.stats = client.stats  # type: ignore[attr-defined]
            raise

    return run


KINDS = {
    "embeddings": (embed, [0.6, 0.8]),  # (3, 4) normalised
    "chat": (_llm(lambda c: c.complete([{"role": "user", "content": "q"}], SamplingParams(seed=1))), "ok"),
    "completions": (_llm(lambda c: c.complete_text("q", SamplingParams(seed=1), stop=["</search>"])), "ok"),
}


def each_kind(server: StackServer, *faults: Any) -> dict[str, Any]:
    """Script ``faults`` for every kind, send one request of each; ``{kind: (value, stats) or the error}``."""
    outcomes: dict[str, Any] = {}
    for kind, (send, _) in KINDS.items():
        server.script(PATHS[kind], *faults)
        try:
            outcomes[kind] = send(server.base_url)
        except Exception as exc:  # noqa: BLE001 - compared below
            outcomes[kind] = exc
    return outcomes


def test_a_refused_connection_fails_at_once_for_every_kind():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    for kind, (send, _) in KINDS.items():
        label = "openai" if kind == "embeddings" else "m"
        with pytest.raises(MissingResourceError) as info:
            send(base_url)
        assert str(info.value).startswith(f"{label}: cannot reach {base_url}{PATHS[kind][3:]}: connection refused "
                                          "(is the server started?); start the server first"), kind
        assert "\n" not in str(info.value)
        assert info.value.exit_code == 4 and info.value.stats["requests"] == 1 and info.value.stats["retries"] == 0


def test_a_refused_connection_after_an_answer_is_retried():
    """A server that answered once and then refuses is restarting: retried, then exit 4 after the last attempt."""
    running = StackServer()
    client = JsonClient(running.base_url, label="m", secret=Secret(""), timeout=TIMEOUT,
                        policy=RetryPolicy(max_retries=RETRIES, base_delay=BACKOFF, max_delay=MAX_BACKOFF))
    assert client.post("/chat/completions", {})["choices"][0]["message"]["content"] == "ok"
    running.stop()
    client.close()  # its kept-alive connection would still reach the stopped server's handler thread
    with pytest.raises(MissingResourceError, match="connection refused on 3 attempts") as info:
        client.post("/chat/completions", {})
    assert info.value.exit_code == 4
    assert client.stats.snapshot()["requests"] == 4 and client.stats.snapshot()["retries"] == 2


@pytest.mark.parametrize(("status", "lacks"), [
    (501, "the server at {base} does not support /{endpoint} (HTTP 501 Not Implemented)"),
    (404, "the server at {base} has no /{endpoint} for this model (HTTP 404 Not Found)"),
])
def test_not_supported_is_not_retried_and_says_what_the_server_lacks(server, status, lacks):
    message = {"error": {"message": "this server does not support embeddings"}}
    outcomes = each_kind(server, (status, {}, message))
    for kind in KINDS:
        error = outcomes[kind]
        assert isinstance(error, FatalProviderError) and error.exit_code == 6, kind
        assert lacks.format(base=server.base_url, endpoint=PATHS[kind][4:]) in str(error), kind
        assert "this server does not support embeddings" in str(error), kind
        assert server.count(PATHS[kind]) == 1 and error.stats["retries"] == 0, kind  # one attempt, no retry


@pytest.mark.parametrize(("fault", "waited"), [
    ((429, {"Retry-After": "0.05"}, {"error": {"message": "slow down"}}), 0.05),  # exactly the server's wait
    ((500, {}, {"error": {"message": "boom"}}), None),  # the backoff: between half and all of 1 ms
    ("hang", None),  # the answer comes after the 0.3 s timeout
])
def test_one_failure_then_the_answer_for_every_kind(server, fault, waited):
    outcomes = each_kind(server, fault)
    for kind, (_, expected) in KINDS.items():
        value, stats = outcomes[kind]
        assert value == expected, kind
        assert (stats["requests"], stats["retries"]) == (2, 1) and server.count(PATHS[kind]) == 2, kind
        if waited is not None:
            assert stats["waited_s"] == waited
        else:
            assert BACKOFF / 2 <= stats["waited_s"] <= BACKOFF


@pytest.mark.parametrize(("fault", "reason"), [
    ((500, {}, {"error": {"message": "boom"}}), "HTTP 500: boom"),
    ("hang", "timed out after 0.3 s"),
])
def test_a_failure_on_every_attempt_is_the_same_error_for_every_kind(server, fault, reason):
    outcomes = each_kind(server, fault, fault, fault)
    for kind, error in outcomes.items():
        label = "openai" if kind == "embeddings" else "m"
        assert isinstance(error, ProviderError) and error.exit_code == 6, kind
        assert str(error) == (f"{label}: POST {server.base_url}{PATHS[kind][3:]} still failing after 3 attempts "
                              f"(2 retries); last error: {reason}")
        assert (error.stats["requests"], error.stats["retries"]) == (3, 2)


def test_a_key_echoed_in_an_error_body_is_cut_out_for_every_kind(server, caplog):
    caplog.set_level(logging.DEBUG)
    echo = (401, {}, {"error": {"message": f"Incorrect API key provided: Bearer {SECRET}"}})
    outcomes = each_kind(server, echo)
    for kind, error in outcomes.items():
        label = "openai" if kind == "embeddings" else "m"
        assert isinstance(error, FatalProviderError) and error.fatal and error.exit_code == 6, kind
        assert str(error) == (f"{label}: POST {server.base_url}{PATHS[kind][3:]} failed with HTTP 401: Incorrect API "
                              "key provided: Bearer *** (check the API key in $R2MED_STACK_KEY)")
        assert error.stats["requests"] == 1  # a rejected key is never retried
    assert [auth for _, _, auth in server.requests] == [f"Bearer {SECRET}"] * 3  # sent, and never shown
    assert SECRET not in caplog.text


def test_a_200_that_is_no_answer_and_echoes_the_key_is_retried_and_cut_out_for_every_kind(server, caplog):
    caplog.set_level(logging.DEBUG)
    outcomes = each_kind(server, "echo", "echo", "echo")
    reasons = {
        "embeddings": "the server returned no embeddings for 1 inputs",
        "chat": "answer has no choices: '{\"object\": \"echo\", \"headers\": {\"authorization\": \"Bearer ***\"}}'",
    }
    reasons["completions"] = reasons["chat"]
    for kind, error in outcomes.items():
        assert isinstance(error, ProviderError) and not isinstance(error, FatalProviderError), kind
        assert str(error).endswith(f"still failing after 3 attempts (2 retries); last error: {reasons[kind]}")
        assert SECRET not in str(error) and error.stats["retries"] == 2
    assert caplog.text.count("Bearer ***") == 4 and SECRET not in caplog.text  # chat's and completions' 2 retries each


def test_the_request_bodies_are_the_bytes_the_openai_client_sent(server):
    """The JSON that ``openai`` 3.57 sent for the same calls (captured once): compact, fields as it ordered them."""
    client = ChatClient("m", server.base_url, api_key_env="R2MED_STACK_KEY")

    async def go() -> None:
        await client.complete([{"role": "user", "content": "h\u00e9llo"}],
                              SamplingParams(temperature=0.7, max_tokens=5, seed=1))
        await client.complete_text("p", SamplingParams(temperature=0.0), stop=["</search>"],
                                   extra={"top_k": 20, "repetition_penalty": 1.0})
        await client.aclose()

    asyncio.run(go())
    assert [body for _, body, _ in server.requests] == [
        '{"model":"m","messages":[{"role":"user","content":"h\u00e9llo"}],"max_tokens":5,"seed":1,'
        '"temperature":0.7}'.encode(),
        b'{"model":"m","prompt":"p","stop":["</search>"],"temperature":0.0,"top_k":20,"repetition_penalty":1.0}',
    ]


def test_a_local_server_gets_no_key_header_when_none_is_set(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for kind in ("embeddings", "chat"):
        client = (OpenAIEmbeddings("m", base_url=server.base_url) if kind == "embeddings"
                  else ChatClient("m", server.base_url))
        if kind == "embeddings":
            client.encode(["a"], kind="query")
        else:
            asyncio.run(client.complete([{"role": "user", "content": "q"}], SamplingParams()))
    assert [auth for _, _, auth in server.requests] == [None, None]


def test_the_agent_writes_no_key_into_its_trajectories_or_summary(server, tmp_path):
    from r2med.agent.loop import AgentConfig, run_agent
    from r2med.agent.search import CorpusSearcher
    from r2med.datasets.model import Dataset

    server.script(PATHS["completions"], *["echo"] * 3)
    searcher = CorpusSearcher("toy", "toy", "dataset", {"d1": "Aspirin."}, {"retriever": "toy"},
                              lambda texts, k: [[("d1", 1.0)] for _ in texts], threading.Lock())
    dataset = Dataset("toy", ["d1"], ["Aspirin."], {"a": "what helps against a fever"}, {})
    config = AgentConfig(protocol="search-r1-infer", llm_model="m", base_url=server.base_url, chat_template="chatml")
    client = ChatClient("m", server.base_url, api_key_env="R2MED_STACK_KEY", max_retries=2, backoff=BACKOFF)
    report = run_agent(dataset, config, searcher, out_dir=tmp_path, client=client, progress=False)
    assert list(report.failures) == ["a"] and server.count(PATHS["completions"]) == 3
    trajectories = (tmp_path / "trajectories.jsonl").read_text()
    assert '"error": "m: POST ' in trajectories and "Bearer ***" in trajectories
    for path in tmp_path.iterdir():
        assert SECRET not in path.read_text(), path.name


def test_an_answer_quoting_the_key_is_kept_without_it_but_a_short_key_is_no_secret(server, monkeypatch):
    """The answer's text is cut free of the key before it is parsed, so no stored text can hold it; a key shorter
    than 8 characters (``EMPTY``, as local servers are given) is no secret, and answers keep the word."""
    chat = PATHS["chat"]
    send = KINDS["chat"][0]
    server.script(chat, (200, {}, {"choices": [{"message": {"content": f"your key is {SECRET}."}}]}))
    assert send(server.base_url)[0] == "your key is ***."
    monkeypatch.setenv("R2MED_STACK_KEY", "EMPTY")
    server.script(chat, (200, {}, {"choices": [{"message": {"content": "EMPTY means nothing here."}}]}))
    assert send(server.base_url)[0] == "EMPTY means nothing here."
    assert [auth for _, _, auth in server.requests] == [f"Bearer {SECRET}", "Bearer EMPTY"]


def test_a_redirect_is_not_followed_and_names_where_it_points_for_every_kind(server):
    outcomes = each_kind(server, (308, {"Location": "https://elsewhere.example/v1"}, {}))
    for kind, error in outcomes.items():
        # exit 4, as a download's redirect that cannot be followed: what was asked for is not at the address given
        assert type(error) is MissingResourceError and server.count(PATHS[kind]) == 1, kind
        assert str(error).endswith(f"{PATHS[kind]} was redirected (HTTP 308) to https://elsewhere.example/v1: an "
                                   "API's redirect is not followed; use the address it points to as the base URL")


def test_answers_that_are_not_what_was_asked_for_are_retried_then_named(server):
    not_an_object = (200, {}, [1, 2])
    outcomes = each_kind(server, not_an_object, not_an_object, not_an_object)
    for kind, error in outcomes.items():
        assert str(error).endswith("(2 retries); last error: answer is JSON but not an object: '[1, 2]'"), kind
    chat_shaped = (200, {}, ANSWERS["/v1/chat/completions"])
    server.script(PATHS["completions"], chat_shaped, chat_shaped, chat_shaped)
    with pytest.raises(ProviderError, match="last error: answer is not a text completion "
                                            r"\(choice without 'text', got NoneType\)$"):
        KINDS["completions"][0](server.base_url)


def test_an_unknown_host_fails_at_once_naming_the_host(monkeypatch):
    """A host name that does not resolve (a misspelt --base-url) is not a busy server: one attempt, exit 4, the host
    named (issue 38, finding 3: six attempts took 27.8 s)."""
    asked = []

    def no_such_host(host, *args, **kwargs):
        asked.append(host.decode() if isinstance(host, bytes) else host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for kind, (send, _) in KINDS.items():
        asked.clear()
        with pytest.raises(MissingResourceError) as info:
            send("https://api.example.invalid/v1")
        label = "openai" if kind == "embeddings" else "m"
        assert str(info.value) == (
            f"{label}: cannot reach https://api.example.invalid/v1{PATHS[kind][3:]}: unknown host 'api.example.invalid' "
            "([Errno -2] Name or service not known); check the host name in the address (or the network's DNS), then: "
            "start the server first (e.g. `vllm serve MODEL --port 8000` or `llama-server -m MODEL.gguf --port 8080`) "
            "and pass its address as --base-url http://HOST:PORT/v1 (or $OPENAI_BASE_URL)"), kind
        assert info.value.exit_code == 4 and info.value.stats["requests"] == 1 and info.value.stats["retries"] == 0
        assert set(asked) == {"api.example.invalid"}, kind


@pytest.mark.parametrize(("cause", "expected"), [
    (ConnectionRefusedError(111, "Connection refused"), Retry("connection refused", unreachable=True)),
    (OSError(101, "Network is unreachable"),
     Retry("cannot connect (ConnectError: [Errno 101] Network is unreachable)", unreachable=True)),
    (TimeoutError("timed out"), Retry("timed out after 1 s")),
])
def test_transport_failures_are_classified_once(cause, expected):
    import httpx2

    client = JsonClient("http://127.0.0.1:1/v1", label="m", secret=Secret(SECRET), timeout=1, policy=RetryPolicy())
    exc = cause if isinstance(cause, TimeoutError) else httpx2.ConnectError(str(cause))
    exc.__cause__ = None if exc is cause else cause
    assert client._transport_retry(exc, "m: POST u") == expected


@pytest.mark.parametrize("verify_message", ["self-signed certificate", None])
def test_a_rejected_tls_certificate_fails_at_once(verify_message):
    import ssl

    import httpx2

    client = JsonClient("https://api.example.org/v1", label="m", secret=Secret(SECRET), timeout=1, policy=RetryPolicy())
    exc = httpx2.ConnectError("handshake failed")
    exc.__cause__ = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    exc.__cause__.verify_message = verify_message  # what the ssl module sets: the reason alone
    why = verify_message or "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    with pytest.raises(ProviderError) as info:
        client._transport_retry(exc, "m: POST u")
    assert str(info.value) == f"m: POST u: TLS certificate rejected ({why})"
