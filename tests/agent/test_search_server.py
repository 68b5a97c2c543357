"""``r2med agent --search-with http://HOST:PORT/retrieve``: a Search-R1-compatible retrieval server as the agent's
search (``r2med.agent.remote``), and ``--seeds``/``--runs``: one stored run per seed and their mean ± sd.

The LLM is the scripted completion server (``completion_server.py``); the retrieval server is ``r2med serve``'s
``RetrievalServer`` in-process over BM25 on the same corpus (for equality and batching), or a scripted
Search-R1-shaped server that fails on purpose. The dataset is SciFact's first 16 judged queries, their judged
documents and 200 others, in R2MED's layout under a folder named Biology.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from completion_server import CompletionServer, searches_for

from conftest import shared_path

pytest.importorskip("uvicorn", reason="r2med serve needs the serve extra")

N_QUERIES = 16
R1 = ("--protocol", "search-r1-infer", "--llm-model", "test-model", "--chat-template", "chatml")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def biology(tmp_path_factory) -> Path:
    scifact = shared_path("data", "scifact")
    folder = tmp_path_factory.mktemp("data") / "Biology"
    folder.mkdir()
    qrels = _rows(scifact / "qrels.jsonl")
    qids: list[str] = []
    for row in qrels:
        if row["q_id"] not in qids:
            qids.append(row["q_id"])
    qids = qids[:N_QUERIES]
    queries = [q for q in _rows(scifact / "query.jsonl") if q["id"] in qids]
    judged = {r["p_id"] for r in qrels if r["q_id"] in qids}
    corpus = _rows(scifact / "corpus.jsonl")
    _write(folder / "corpus.jsonl",
           [d for d in corpus if d["id"] in judged] + [d for d in corpus if d["id"] not in judged][:200])
    _write(folder / "query.jsonl", queries)
    _write(folder / "qrels.jsonl", [r for r in qrels if r["q_id"] in qids])
    return folder


@pytest.fixture(scope="module")
def served(biology):
    """``(server, calls)``: ``r2med serve``'s server over BM25 on the Biology corpus; ``calls`` gets the query texts
    of each search the server runs (one per ``/retrieve`` request)."""
    from r2med.agent.search import open_searcher
    from r2med.agent.server import RetrievalServer
    from r2med.datasets.local import load_corpus
    from r2med.retrievers.registry import make_retriever

    corpus = load_corpus(biology)
    searcher = open_searcher(make_retriever("bm25", cache_dir=None, progress=False), corpus, source="dataset")
    calls: list[list[str]] = []
    inner = searcher._search

    def counted(texts, k):
        calls.append(list(texts))
        return inner(texts, k)

    searcher._search = counted
    with RetrievalServer(searcher, port=0) as server:
        yield server, calls


def _plain(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("llm", "search_server")}


@pytest.mark.parametrize("style", [("--protocol", "search-r1-infer"), ("--protocol", "search-o1")])
def test_a_retrieval_server_gives_the_trajectories_of_the_same_retriever(cli, biology, served, tmp_path, isolated_home,
                                                                         style):
    server, _ = served
    out = tmp_path / "results"
    common = (*style, "--llm-model", "test-model", "--chat-template", "chatml", "--data-dir", biology,
              "--output", out, "--json")
    with CompletionServer() as llm:
        local = cli("agent", *common, "--base-url", llm.base_url, "--llm-name", "local")
        remote = cli("agent", *common, "--base-url", llm.base_url, "--llm-name", "remote",
                     "--search-with", server.retrieve_url)
    assert local.code == 0, local.err
    assert remote.code == 0, remote.err
    method = "search-r1" if style[1] == "search-r1-infer" else "search-o1"
    port = server.retrieve_url.split(":")[-1].split("/")[0]
    name = f"server-127.0.0.1_{port}_retrieve"
    assert remote.json()["system"] == f"agent/{method}/remote/{name}"
    mine = _rows(out / "agent" / method / "local" / "bm25" / "Biology.trajectories.jsonl")
    theirs = _rows(out / "agent" / method / "remote" / name / "Biology.trajectories.jsonl")
    assert len(mine) == N_QUERIES and sum(len(t["searches"]) for t in mine) >= N_QUERIES
    assert [_plain(t) for t in theirs] == [_plain(t) for t in mine]
    # the server's identity in every trajectory and in the result's key (r2med serve says its corpus on /health)
    identity = {"server": server.retrieve_url, "corpus": "Biology", "source": "dataset", "retriever": "bm25",
                "documents": len(_rows(biology / "corpus.jsonl"))}
    assert all(t["search_server"] == identity for t in theirs)
    manifest = json.loads((out / "agent" / method / "remote" / name / "Biology.manifest.json").read_text())
    assert manifest["config"]["search"] == identity
    assert remote.json()["scores"]["Biology"] == local.json()["scores"]["Biology"]


def test_concurrent_searches_go_in_one_request(cli, biology, served, tmp_path, isolated_home):
    """16 queries in flight, each searching twice then answering: every query waits for its search at the same
    time, so the server gets one request per round, carrying that round's distinct searches."""
    server, calls = served
    questions = [q["text"] for q in _rows(biology / "query.jsonl")]
    first = list(dict.fromkeys(searches_for(q)[0] for q in questions))
    second = list(dict.fromkeys(s for q in questions if (s := searches_for(q)[1]) not in first))
    calls.clear()
    with CompletionServer(latency=0.01) as llm:
        result = cli("agent", *R1, "--base-url", llm.base_url, "--search-with", server.retrieve_url,
                     "--concurrency", "16", "--search-wait", "60", "--data-dir", biology,
                     "--output", tmp_path / "results", "--json")
    assert result.code == 0, result.err
    assert len(calls) == 2
    assert sorted(calls[0]) == sorted(first) and sorted(calls[1]) == sorted(second)
    report = result.json()["agent"]["Biology"]
    assert report["search_requests"] == 2 and report["search_calls"] == len(first) + len(second)


# --------------------------------------------------------------------------------------------- a failing server


class ScriptedRetrieval:
    """A Search-R1-shaped ``/retrieve`` on 127.0.0.1 answering the documents d1..d3 to any query; ``script`` gives
    the first requests' behaviour ("500", "not-json", "slow": sleeps 3 s), then it answers right."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner.requests.append(body)
                step = owner.script.pop(0) if owner.script else "ok"
                if step == "slow":
                    time.sleep(3)
                status, data = 200, json.dumps({"result": [
                    [{"document": {"id": f"d{i}", "contents": f'"T{i}"\ntext {i}'}, "score": 4.0 - i}
                     for i in range(1, 1 + body["topk"])] for _ in body["queries"]]}).encode()
                if step == "500":
                    status, data = 500, b'{"error": "busy"}'
                elif step == "not-json":
                    data = b"<html>oops</html>"
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def two_queries(biology, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("small") / "Biology"
    folder.mkdir()
    queries = _rows(biology / "query.jsonl")[:2]
    _write(folder / "query.jsonl", queries)
    _write(folder / "corpus.jsonl", _rows(biology / "corpus.jsonl"))
    _write(folder / "qrels.jsonl", [r for r in _rows(biology / "qrels.jsonl") if r["q_id"] in {q["id"] for q in queries}])
    return folder


def _run_against(cli, folder: Path, url: str, out: Path, *extra: str):
    with CompletionServer() as llm:
        return cli("agent", *R1, "--base-url", llm.base_url, "--search-with", url, "--max-retries", "1",
                   "--timeout", "1", "--data-dir", folder, "--output", out, *extra)


def test_a_500_is_retried_then_the_answer_is_used(cli, two_queries, tmp_path, isolated_home):
    with ScriptedRetrieval(["500"]) as server:
        result = _run_against(cli, two_queries, server.url, tmp_path / "out", "--json")
    assert result.code == 0, result.err
    assert server.requests[0] == server.requests[1]  # the same request again
    assert server.requests[0]["topk"] == 3 and server.requests[0]["return_scores"] is True
    name = f"server-127.0.0.1_{server.url.split(':')[-1].split('/')[0]}_retrieve"
    rows = _rows(tmp_path / "out" / "agent" / "search-r1" / "test-model" / name / "Biology.trajectories.jsonl")
    assert rows[0]["searches"][0]["ids"] == ["d1", "d2", "d3"] and rows[0]["searches"][0]["scores"] == [3.0, 2.0, 1.0]
    assert rows[0]["search_server"] == {"server": server.url}  # no /health: only its address
    assert '<information>Doc 1(Title: "T1") text 1\n' in rows[0]["output"]


def test_a_refused_connection_is_exit_4_naming_the_fix(cli, two_queries, tmp_path, isolated_home):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _run_against(cli, two_queries, f"http://127.0.0.1:{port}/retrieve", tmp_path / "out")
    assert result.code == 4, result.err
    # nothing ever answered there: it fails at once (issue 25), no retry
    assert (f"retrieval server: cannot reach http://127.0.0.1:{port}/retrieve: connection refused (is the server "
            "started?); start the retrieval server first") in result.err
    assert "--search-with http://HOST:PORT/retrieve" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize(("script", "reason"), [(["not-json"] * 2, "answer is not JSON"),
                                               (["slow"] * 2, "timed out after 1 s")])
def test_bad_answers_and_timeouts_are_retried_then_exit_6(cli, two_queries, tmp_path, isolated_home, script, reason):
    with ScriptedRetrieval(script) as server:
        result = _run_against(cli, two_queries, server.url, tmp_path / "out")
    assert result.code == 6, result.err
    assert "2 of 2 queries failed" in result.err
    assert f"retrieval server: POST {server.url} still failing after 2 attempts (1 retries); last error: {reason}" \
        in result.err
    assert len(server.requests) == 2  # both queries' searches in one request, sent twice


def test_a_wrong_search_with_url_is_a_usage_error(cli, two_queries, tmp_path):
    result = cli("agent", *R1, "--base-url", "http://127.0.0.1:9/v1", "--search-with", "http:///retrieve",
                 "--data-dir", two_queries, "--output", tmp_path / "out")
    assert result.code == 2 and "a retrieval server is http(s)://HOST:PORT/retrieve" in result.err, result.err


# --------------------------------------------------------------------------------------------- --seeds


class SeededServer(CompletionServer):
    """Seed 2 gets text without any tag (no search, no documents: nDCG 0); other seeds the usual script."""

    def answer(self, body):
        if body.get("seed") == 2:
            body = {**body, "prompt": body["prompt"].replace("Question: ", "Question: GARBAGE ")}
        return super().answer(body)


def test_seeds_store_each_run_and_report_mean_and_sd(cli, two_queries, tmp_path, isolated_home):
    out = tmp_path / "out"
    with SeededServer() as llm:
        result = cli("agent", *R1, "--base-url", llm.base_url, "--temperature", "0.7", "--seeds", "1,2,3",
                     "--data-dir", two_queries, "--output", out, "--json")
        assert result.code == 0, result.err
        seeds = {body["seed"] for body in llm.requests}
    assert seeds == {1, 2, 3}
    data = result.json()
    assert [(r["seed"], r["system"]) for r in data["runs"]] == [
        (s, f"agent/search-r1/test-model-seed{s}/bm25") for s in (1, 2, 3)]
    stored = {}
    for s in (1, 2, 3):
        folder = out / "agent" / "search-r1" / f"test-model-seed{s}" / "bm25"
        assert json.loads((folder / "Biology.manifest.json").read_text())["config"]["agent"]["seed"] == s
        stored[s] = json.loads((folder / "Biology.json").read_text())["test"]["ndcg_at_10"]
    x = stored[1]
    assert x > 0 and stored[3] == x and stored[2] == 0.0  # seed 2 searched nothing
    # (x, 0, x): mean 2x/3; sample sd sqrt(((x/3)^2 * 2 + (2x/3)^2) / 2) = x / sqrt(3)
    spread = data["mean_sd"]["Biology"]["ndcg_at_10"]
    assert spread["runs"] == 3
    assert spread["mean"] == pytest.approx(2 * x / 3, abs=1e-9)
    assert spread["sd"] == pytest.approx(x / math.sqrt(3), abs=1e-9)
    # rerun: every seed's stored run is reused, nothing sent again
    with SeededServer() as llm:
        again = cli("agent", *R1, "--base-url", llm.base_url, "--temperature", "0.7", "--runs", "3",
                    "--data-dir", two_queries, "--output", out)
        assert again.code == 0, again.err
        assert llm.requests == []
    assert "mean ± sd (sample, n - 1) over 3 seeded runs (1,2,3)" in again.out


@pytest.mark.parametrize(("args", "message"), [
    (("--style", "search-r1", "--seeds", "1,2"), "protocol search-r1-eval is greedy (temperature 0): every seed gives the same run"),
    (("--protocol", "search-r1-infer", "--seeds", "1,2", "--runs", "2"), "pass --seeds or --runs, not both"),
    (("--protocol", "search-r1-infer", "--seeds", "1,1"), "--seeds needs distinct seeds, got 1,1"),
    (("--protocol", "search-r1-infer", "--seeds", "1,2", "--seed", "4"), "--seed 4 and --seeds/--runs"),
])
def test_seeds_a_greedy_protocol_or_conflicting_flags_refuse(cli, two_queries, tmp_path, args, message):
    result = cli("agent", "--llm-model", "test-model", "--base-url", "http://127.0.0.1:9/v1", "--chat-template",
                 "chatml", *args, "--data-dir", two_queries, "--output", tmp_path / "out")
    assert result.code == 2 and message in result.err, result.err


def test_a_pipeline_file_names_a_server_and_takes_no_seeds(tmp_path):
    from r2med.config import parse_spec
    from r2med.errors import InvalidInputError

    table = {"style": "search-r1", "llm_model": "m", "base_url": "http://x/v1"}
    spec = parse_spec({"agent": {**table, "search_with": "http://10.0.0.5:8000/retrieve", "search_wait": 0.5}},
                      base=tmp_path)
    assert spec.agent.search_with == "http://10.0.0.5:8000/retrieve" and spec.agent.config.search_wait == 0.5
    with pytest.raises(InvalidInputError, match=r"\[agent\]: unknown key\(s\) seeds"):
        parse_spec({"agent": {**table, "seeds": [1, 2]}}, base=tmp_path)


def test_a_server_searches_its_own_corpus_not_a_knowledge_dir(cli, two_queries, tmp_path):
    result = cli("agent", *R1, "--base-url", "http://127.0.0.1:9/v1", "--search-with", "http://127.0.0.1:9/retrieve",
                 "--knowledge-dir", two_queries, "--data-dir", two_queries, "--output", tmp_path / "out")
    assert result.code == 2 and "searches the server's corpus; drop --knowledge-dir" in result.err, result.err
