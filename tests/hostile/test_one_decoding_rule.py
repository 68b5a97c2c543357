"""One decoding rule for every answer (issue 35, finding 13): a 2xx answer whose body is not UTF-8 is malformed
(RFC 8259 8.1: JSON between systems is UTF-8) under every protocol alike: retried, then the query fails naming the
server. Before, one agent protocol read it with its bad bytes replaced by U+FFFD (text the model never wrote)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from completion_server import CompletionServer  # noqa: E402
from conftest import shared_path  # noqa: E402

from r2med.agent.loop import AgentConfig, run_agent  # noqa: E402
from r2med.agent.search import open_searcher  # noqa: E402
from r2med.datasets import load_dir  # noqa: E402
from r2med.retrievers.bm25.retriever import BM25Retriever  # noqa: E402

QUESTION = "What causes scurvy in sailors?"


@pytest.fixture(scope="module")
def scifact():
    return load_dir(shared_path("data", "scifact"), "scifact")


@pytest.fixture(scope="module")
def searcher(scifact):
    return open_searcher(BM25Retriever(progress=False), scifact)


def _serve(server: CompletionServer, encoding: str) -> None:
    """Make ``server`` write its answers in ``encoding`` (``latin-1``: "é" as the one byte 0xE9, not UTF-8)."""
    handler = server._httpd.RequestHandlerClass

    def _send(self, status, payload):
        text = json.dumps(payload, ensure_ascii=False)
        if "choices" in payload:
            text = text.replace("<answer>", "<answer> café", 1)
        data = text.encode(encoding)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    handler._send = _send


@pytest.mark.parametrize("protocol", ["search-r1-infer", "search-r1-eval"])
@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_an_answer_that_is_not_utf8_is_refused_under_every_protocol(scifact, searcher, tmp_path, protocol, encoding):
    dataset = dataclasses.replace(scifact, queries={"q": QUESTION}, qrels={})
    with CompletionServer() as server:
        _serve(server, encoding)
        config = AgentConfig(style="search-r1", protocol=protocol, llm_model="test-model", base_url=server.base_url,
                             chat_template="chatml", concurrency=1, max_retries=1)
        report = run_agent(dataset, config, searcher, out_dir=tmp_path, progress=False)
        sent = len(server.requests)
    if encoding == "utf-8":
        assert report.failures == {}
        assert report.trajectories[0]["answer"].startswith("café The evidence on")
        return
    assert report.trajectories == [] or report.trajectories[0].get("answer") is None
    failure = report.failures["q"]
    assert "/v1/completions still failing after 2 attempts (1 retries)" in failure
    assert "answer is not UTF-8, which JSON must be" in failure
    assert sent >= 2  # the first turn, asked again (--max-retries 1), never read with U+FFFD in place of its bytes
