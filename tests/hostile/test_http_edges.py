"""The edges of r2med's one HTTP stack (``r2med.http``) against loopback servers that really misbehave: redirects
that loop, never end or leave http(s); answers that drip a byte at a time, flood without end or claim a huge length;
a body that cannot be decoded; a retrieval server whose ``/health`` echoes the ``Authorization`` header. Every
request (a file's GET, a JSON POST or GET, the retrieval server's ``/health``) has one deadline for the whole
exchange, a size cap on every read, and ends in an r2med error (never an ``httpx2`` traceback) without the key."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_server import HostileServer

from conftest import DATA
from r2med.errors import MissingResourceError, ProviderError
from r2med.http import JsonClient, RetryPolicy, Secret
from r2med.http.download import download

KEY = "edge-KEY-0123456789"
TOKEN = base64.b64encode(f"user:{KEY}".encode()).decode()
FAST = RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.02)
#: the bodies of the flooding behaviours (a tenth of the size the issue measured)
FLOOD_BYTES = 96 * 2**20
RUN = b"q1 Q0 d1 1 1.0 x\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        behaviour, _, rest = self.path.strip("/").partition("/")
        with owner.lock:
            owner.log.append((self.command, self.path, self.headers.get("Authorization")))
        try:
            getattr(self, "_" + behaviour.replace("-", "_"))(rest, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_POST = do_GET

    def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                           **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, location: str) -> None:
        self._send(302, b"", {"Location": location})

    # ---- redirects
    def _loop(self, rest: str, body: bytes) -> None:  # to itself
        self._redirect(self.path)

    def _pingpong(self, rest: str, body: bytes) -> None:  # /pingpong/a <-> /pingpong/b
        self._redirect(f"/pingpong/{'b' if rest.startswith('a') else 'a'}")

    def _chain(self, rest: str, body: bytes) -> None:  # always somewhere new
        self._redirect(self.path + "/n")

    def _ftp(self, rest: str, body: bytes) -> None:
        self._redirect(f"ftp://user:{KEY}@127.0.0.1/{rest}")

    def _file(self, rest: str, body: bytes) -> None:
        self._redirect("file:///etc/passwd")

    def _hop(self, rest: str, body: bytes) -> None:  # /hop/3/x -> /hop/2/x -> /hop/1/x -> /ok/x
        count, _, tail = rest.partition("/")
        self._redirect(f"/hop/{int(count) - 1}/{tail}" if int(count) > 1 else f"/ok/{tail}")

    def _ok(self, rest: str, body: bytes) -> None:
        self._send(200, RUN)

    # ---- bodies
    def _drip(self, rest: str, body: bytes) -> None:  # a byte every 0.2 s of a 1,000-byte answer
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        while not self.server.owner.stopped.wait(0.2):
            self.wfile.write(b" ")
            self.wfile.flush()
            self.server.owner.count(1)

    def _flood(self, rest: str, body: bytes, status: int = 200) -> None:  # FLOOD_BYTES chunked, of unknown length
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"x" * 2**16
        for _ in range(FLOOD_BYTES // len(chunk)):
            if self.server.owner.stopped.is_set():
                return
            self.wfile.write(b"10000\r\n" + chunk + b"\r\n")
            self.server.owner.count(len(chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _flood500(self, rest: str, body: bytes) -> None:
        self._flood(rest, body, status=500)

    def _big(self, rest: str, body: bytes) -> None:  # says its FLOOD_BYTES length first
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(FLOOD_BYTES))
        self.end_headers()
        chunk = b"x" * 2**16
        for _ in range(FLOOD_BYTES // len(chunk)):
            if self.server.owner.stopped.is_set():
                return
            self.wfile.write(chunk)
            self.server.owner.count(len(chunk))

    def _gzip(self, rest: str, body: bytes) -> None:  # says gzip, is not
        self._send(200, b"not gzip at all", {"Content-Encoding": "gzip"})

    def _echo(self, rest: str, body: bytes) -> None:
        """A retrieval server: ``/retrieve`` answers d1; ``/health`` quotes the Authorization header, as sent in
        ``corpus`` and with every character JSON-escaped in ``source``."""
        if rest == "retrieve":
            query = json.loads(body)
            self._send(200, json.dumps({"result": [[{"document": {"id": "d1", "contents": '"d1"\ntext'}, "score": 1.0}]
                                                   for _ in query["queries"]]}).encode())
            return
        auth = self.headers.get("Authorization") or ""
        escaped = "".join(f"\\u{ord(c):04x}" for c in auth)
        self._send(200, ('{"status": "ok", "corpus": %s, "source": "%s", "retriever": "bm25", "documents": 3}'
                         % (json.dumps(auth), escaped)).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: EdgeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class EdgeServer:
    """``EdgeServer().url("loop/x.txt")`` -> ``http://127.0.0.1:PORT/loop/x.txt``; ``sent`` counts the body bytes
    the dripping and flooding behaviours have handed to the connection; ``log`` every request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.sent = 0
        self.log: list[tuple[str, str, str | None]] = []
        self._http = _Server(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        self.base = f"http://127.0.0.1:{self._http.server_address[1]}"

    def count(self, n: int) -> None:
        with self.lock:
            self.sent += n

    def url(self, path: str, *, user: bool = False) -> str:
        return f"{self.base.replace('http://', f'http://user:{KEY}@') if user else self.base}/{path}"

    def __enter__(self) -> EdgeServer:  # noqa: PYI034 - typing.Self needs Python 3.11
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self._http.shutdown()
        self._http.server_close()


@pytest.fixture
def server():
    with EdgeServer() as running:
        yield running


def _within(seconds: float, call: Any) -> Any:
    """What ``call()`` returned or raised, from a thread given ``seconds`` (far more than any deadline here)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 - returned to the test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    return outcome[0]


# ---------------------------------------------------------------------------------------------------- redirects
FIX = "check the address and the network, or download the file and pass its path instead"


@pytest.mark.parametrize(("path", "why"), [
    ("loop/x.txt", "redirected in a loop: {b}/loop/x.txt -> {b}/loop/x.txt"),
    ("pingpong/a", "redirected in a loop: {b}/pingpong/a -> {b}/pingpong/b -> {b}/pingpong/a"),
    ("chain/x", "more than 10 redirects (the last to {b}/chain/x/n/n/n/n/n/n/n/n/n/n/n)"),
    ("ftp/x.txt", "redirected to ftp://127.0.0.1/x.txt, which is not an http(s) URL: not followed"),
    ("file/x.txt", "redirected to file:///etc/passwd, which is not an http(s) URL: not followed"),
])
@pytest.mark.parametrize("user", [False, True])
def test_a_download_redirected_nowhere_is_a_missing_resource_naming_the_url(server, path, why, user):
    """A redirect loop was ``httpx2.TooManyRedirects`` (a traceback, exit 1): now exit 4 with the URL as given (no
    credentials), where the redirects went, and the fix; not retried (the same request is redirected again)."""
    error = _within(60, lambda: download(server.url(path, user=user), policy=FAST, sleep=lambda s: None))
    assert type(error) is MissingResourceError, repr(error)
    b = server.base
    assert str(error) == f"download: GET {b}/{path}: {why.format(b=b)}; {FIX}"
    first = [p for _, p, _ in server.log].count(f"/{path}")
    assert first == 1  # one attempt
    if user:  # the credentials go to every hop of the same origin, and are in no message
        assert {auth for _, _, auth in server.log} == {f"Basic {TOKEN}"}
        assert KEY not in str(error) and TOKEN not in str(error)


def test_a_download_follows_a_few_redirects_to_the_file(server):
    assert download(server.url("hop/3/x.txt", user=True), policy=FAST) == RUN
    assert [(p, auth) for _, p, auth in server.log] == [(p, f"Basic {TOKEN}") for p in
                                                        ("/hop/3/x.txt", "/hop/2/x.txt", "/hop/1/x.txt", "/ok/x.txt")]


def test_reproduce_first_stage_redirect_loop_is_exit_4_naming_the_url(cli, server, isolated_home, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    result = cli("reproduce", "reranker/reasonrank-32b/e5/top_100", "--first-stage",
                 server.url("loop/{dataset}.txt", user=True), "--tasks", "Biology", "--data-dir", data,
                 "--output", tmp_path / "out", "--timeout", "5", "--max-retries", "1")
    assert "Traceback" not in result.err, result.err
    assert result.code == 4, (result.code, result.err)
    loop = f"{server.base}/loop/Biology.txt"
    assert f"download: GET {loop}: redirected in a loop: {loop} -> {loop}; {FIX}" in result.err
    assert KEY not in result.out + result.err and TOKEN not in result.out + result.err


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_json_request_is_not_redirected_and_the_redirect_is_a_missing_resource(server, method):
    """An API's redirect is not followed (a POST's body would be lost, and the key sent on): exit 4 as a download's
    loop is, the target shown without credentials, one request."""
    client = JsonClient(server.url("ftp", user=True), label="m", secret=Secret(None), timeout=5, policy=FAST)
    send = (lambda: client.post("v1/x", {"a": 1})) if method == "POST" else (lambda: client.get("v1/x"))
    error = _within(60, send)
    client.close()
    assert type(error) is MissingResourceError, repr(error)
    assert str(error) == (f"m: {method} {server.base}/ftp/v1/x was redirected (HTTP 302) to ftp://127.0.0.1/v1/x: "
                          "an API's redirect is not followed; use the address it points to as the base URL")
    assert len(server.log) == 1


# ---------------------------------------------------------------------------------------------------- deadlines, caps
def test_a_retrieval_servers_dripping_health_is_abandoned_at_the_deadline(server, caplog):
    """``/health`` sending a byte every 0.2 s held the agent for ever (httpx's timeouts are per read): now each of
    the ``--max-retries 1`` + 1 attempts ends at the ``--timeout`` of 1 s, and the search has no identity."""
    from r2med.agent.remote import ServerSearch

    search = ServerSearch(server.url("drip/retrieve"), timeout=1, max_retries=1, backoff=0.01)
    with caplog.at_level(logging.INFO, logger="r2med"):
        assert _within(60, search.health) == {}
    assert [(m, p) for m, p, _ in server.log] == [("GET", "/drip/health")] * 2
    assert server.sent < 40  # ~5 a second for two 1 s attempts; 1,000 without a deadline
    assert (f"retrieval server: GET {server.base}/drip/health still failing after 2 attempts (1 retries); last "
            "error: timed out after 1 s") in caplog.text


@pytest.mark.parametrize("behaviour", ["flood", "big"])
def test_a_retrieval_servers_huge_health_is_cut_off(server, caplog, behaviour):
    """A 96 MiB ``/health`` was read whole (the issue's 100 MB took 657 MB): now reading stops past 1 MiB (or at
    once, when the server says its length) and the search has no identity."""
    from r2med.agent.remote import ServerSearch

    search = ServerSearch(server.url(f"{behaviour}/retrieve"), timeout=30, max_retries=1, backoff=0.01)
    with caplog.at_level(logging.INFO, logger="r2med"):
        assert _within(60, search.health) == {}
    assert len(server.log) == 1  # the same request gets the same answer: not retried
    assert server.sent < FLOOD_BYTES // 2, server.sent  # what the sockets' buffers took, not the answer
    assert f"retrieval server: GET {server.base}/{behaviour}/health: an answer longer than 1 MiB" in caplog.text


def test_a_description_get_is_capped_and_an_error_body_is_read_only_as_far_as_its_message(server):
    """``JsonClient.get`` (``/v1/models``, ``/props``) reads at most 8 MiB, a non-2xx body at most 64 KiB: a
    96 MiB flood is not read whole either way."""
    client = JsonClient(server.base, label="m", secret=Secret(None), timeout=30, policy=FAST)
    error = _within(60, lambda: client.get("flood/v1/models"))
    assert type(error) is ProviderError, repr(error)
    assert str(error) == f"m: GET {server.base}/flood/v1/models: an answer longer than 8 MiB"
    assert server.sent < FLOOD_BYTES // 2, server.sent
    sent, server.sent = server.sent, 0
    error = _within(60, lambda: client.post("flood500/v1/x", {}))
    client.close()
    assert type(error) is ProviderError, repr(error)
    assert str(error) == (f"m: POST {server.base}/flood500/v1/x still failing after 2 attempts (1 retries); last "
                          f"error: HTTP 500: {'x' * 500}...")
    assert server.sent < FLOOD_BYTES // 2, (sent, server.sent)


def test_an_answer_that_cannot_be_decoded_is_retried_then_an_r2med_error(server):
    """A body that says gzip and is not raised ``httpx2.DecodingError`` out of the stack (a traceback)."""
    client = JsonClient(server.base, label="m", secret=Secret(None), timeout=5, policy=FAST)
    error = _within(60, lambda: client.get("gzip/v1/models"))
    client.close()
    assert type(error) is ProviderError, repr(error)
    assert str(error) == (f"m: GET {server.base}/gzip/v1/models still failing after 2 attempts (1 retries); last "
                          "error: an answer that cannot be decoded (DecodingError: Error -3 while decompressing "
                          "data: incorrect header check)")
    error = _within(60, lambda: download(server.url("gzip/x.txt"), policy=FAST, sleep=lambda s: None))
    assert type(error) is ProviderError and "an answer that cannot be decoded" in str(error), repr(error)


# ---------------------------------------------------------------------------------------------------- keys
def test_an_echoing_health_gives_no_key_to_the_search_identity(server):
    """``--search-with http://user:KEY@host/retrieve``: /health quoting the Authorization header, as sent and
    JSON-escaped (which a cut of the raw text misses), leaves only ``***`` where the token was."""
    from r2med.agent.remote import ServerSearch

    search = ServerSearch(server.url("echo/retrieve", user=True), timeout=5, max_retries=0)
    assert _within(60, search.health) == {"corpus": "Basic ***", "source": "Basic ***", "retriever": "bm25",
                                          "documents": 3}
    assert server.log == [("GET", "/echo/health", f"Basic {TOKEN}")]


def _written(*roots: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for root in roots for p in root.rglob("*") if p.is_file())


def test_the_agent_writes_no_key_an_echoing_health_quoted(cli, server, isolated_home, tmp_path):
    """The issue's run: the Basic token was in the manifest, both trajectories files and summary.json."""
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    out = tmp_path / "out"
    with HostileServer() as llm:
        result = cli("agent", "--style", "search-r1", "--chat-template", "chatml", "--max-turns", "2", "--base-url",
                     llm.url("ok"), "--llm-model", "m", "--data-dir", data, "--output", out, "--timeout", "5",
                     "--max-retries", "0", "--search-with", server.url("echo/retrieve", user=True))
    assert "Traceback" not in result.err, result.err
    assert result.code == 0, (result.code, result.err)
    manifests = list(out.rglob("*.manifest.json"))
    assert len(manifests) == 1
    assert json.loads(manifests[0].read_text())["config"]["search"] == {
        "server": f"{server.base}/echo/retrieve", "corpus": "Basic ***", "source": "Basic ***", "retriever": "bm25",
        "documents": 3}
    shown = result.out + result.err + _written(out, isolated_home)
    assert KEY not in shown and TOKEN not in shown


def test_every_http_request_of_r2med_goes_through_its_one_stack():
    """No module outside ``r2med.http`` imports an HTTP client (``ServerSearch.health`` called ``httpx2.get``, which
    had neither the deadline, the cap nor the redaction); the hub's own client (``huggingface_hub``) is the hub's."""
    import ast

    clients = {"httpx", "httpx2", "requests", "aiohttp", "urllib3", "http.client"}
    src = Path(__file__).resolve().parents[2] / "src" / "r2med"
    found = []
    for path in sorted(src.rglob("*.py")):
        if path.parent.name == "http" and path.parent.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.Attribute | ast.Name) and getattr(node, "attr", getattr(node, "id", "")) in (
                    "urlopen", "build_opener"):
                names = ["urllib.request.urlopen"]
            found += [f"{path.relative_to(src)}:{node.lineno}: {name}" for name in names
                      if name in clients or name.split(".")[0] in clients or name == "urllib.request.urlopen"]
    assert found == []
