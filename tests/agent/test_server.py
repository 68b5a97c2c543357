"""``r2med serve``: Search-R1's retrieval API (``POST /retrieve``) over BM25 on SciFact, through real HTTP.

The requests are the ones Search-R1 sends (``search_r1/search/retrieval_request.py``, and the agent's
``batch_search``); the answers are read back with Search-R1's own ``_passages2string`` (re-implemented below from
its code), so what its agent would see is checked, not only the JSON's shape.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, shared_path
from r2med.agent.search import open_searcher, search_r1_contents
from r2med.agent.server import MAX_BODY, MAX_QUERIES, MAX_TOP_K, RetrievalServer, check_options
from r2med.cli import serve as serve_cli
from r2med.datasets import load_dataset
from r2med.errors import ProviderError, UsageError
from r2med.retrievers.registry import make_retriever
from r2med.installed import install_command

pytest.importorskip("uvicorn", reason="r2med serve needs the serve extra")

#: SciFact query 5 and the top document of BM25 (r2med variant, the official pipeline) for it
QUERY = "1/2000 in UK have abnormal PrP positivity."
TOP_DOC = "13734012"
#: the first line of the first passage as Search-R1's _passages2string writes it: "Doc 1(Title: <title line>)"
#: and the document's text up to its first newline (the title line is search_r1_contents's quoted id)
FIRST_LINE = (
    'Doc 1(Title: "13734012") Prevalent abnormal prion protein in human appendixes after bovine spongiform '
    "encephalopathy epizootic: large scale survey OBJECTIVES To carry out a further survey of archived appendix "
    "samples to understand better the differences between existing estimates of the prevalence of subclinical "
    "infection with prions after the bovine spongiform encephalopathy epizootic and to see whether a broader birth "
    "cohort was affected, and to understand better the implications for the management of blood and blood products "
    "and for the handling of surgical instruments.   "
)


def passages2string(retrieval_result: list[dict]) -> str:
    """Search-R1's ``LLMGenerationManager._passages2string`` (search_r1/llm_agent/generation.py)."""
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        format_reference += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return format_reference


@pytest.fixture(scope="module")
def scifact():
    return load_dataset("scifact", path=shared_path("data", "scifact"))


@pytest.fixture(scope="module")
def searcher(scifact):
    return open_searcher(make_retriever("bm25", cache_dir=None, progress=False), scifact)


@pytest.fixture(scope="module")
def server(searcher):
    with RetrievalServer(searcher, port=0) as running:
        yield running


def call(url: str, payload: object = None, *, method: str = "POST", data: bytes | None = None,
         headers: dict | None = None) -> tuple[int, dict, Any]:
    """``(status, JSON body, headers)`` of one request (urllib; 4xx/5xx answers too)."""
    if data is None and payload is not None:
        data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), response.headers  # case-insensitive names
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read()), exc.headers


def official_top5(qid: str) -> list[tuple[str, float]]:
    rows = [line.split() for line in shared_path("data", "scifact", "official_bm25.run").read_text().splitlines()]
    return [(row[2], float(row[4])) for row in rows if row[0] == qid][:5]


# --- Search-R1's requests ------------------------------------------------------------------------------------


def test_search_r1_request_200_queries_top5_with_scores(server, searcher):
    # search_r1/search/retrieval_request.py: 200 copies of one query, topk 5, scores
    status, body, headers = call(server.retrieve_url, {"queries": [QUERY] * 200, "topk": 5, "return_scores": True})
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert list(body) == ["result"] and len(body["result"]) == 200
    expected = searcher.search([QUERY], 5)[0]
    assert expected[0][0] == TOP_DOC
    for hits in body["result"]:
        assert len(hits) == 5
        assert all(set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"} for hit in hits)
        assert [(hit["document"]["id"], hit["score"]) for hit in hits] == expected  # exact floats through JSON
        assert [hit["document"]["contents"] for hit in hits] == [
            search_r1_contents(doc, searcher.documents[doc]) for doc, _ in expected]
    # the same ranking as R2MED's official BM25 run of this query (SciFact query 5; scores there to 6 decimals)
    official = official_top5("5")
    assert [doc for doc, _ in expected] == [doc for doc, _ in official]
    assert all(abs(score - ref) < 5e-6 for (_, score), (_, ref) in zip(expected, official))


def test_what_search_r1s_agent_reads(server):
    _, body, _ = call(server.retrieve_url, {"queries": [QUERY], "topk": 3, "return_scores": True})
    text = passages2string(body["result"][0])
    assert text.split("\n")[0] == FIRST_LINE
    assert [line[:6] for line in text.splitlines() if re.match(r"Doc \d\(Title", line)] == ["Doc 1(", "Doc 2(", "Doc 3("]


def test_without_scores_each_entry_is_the_document(server, searcher):
    status, body, _ = call(server.retrieve_url, {"queries": [QUERY, "vitamin B12 homocysteine"], "topk": 4,
                                                 "return_scores": False})
    assert status == 200 and len(body["result"]) == 2
    for query, hits in zip([QUERY, "vitamin B12 homocysteine"], body["result"]):
        expected = searcher.search([query], 4)[0]
        assert hits == [{"id": doc, "contents": search_r1_contents(doc, searcher.documents[doc])} for doc, _ in expected]
    # return_scores left out: false, as Search-R1's QueryRequest
    assert call(server.retrieve_url, {"queries": [QUERY], "topk": 4})[1] == {"result": body["result"][:1]}


@pytest.mark.parametrize("topk", ["missing", None, 0])
def test_no_topk_is_the_default_3(server, topk):
    payload = {"queries": [QUERY], "return_scores": True}
    if topk != "missing":
        payload["topk"] = topk
    status, body, _ = call(server.retrieve_url, payload)
    assert status == 200 and len(body["result"][0]) == 3 and body["result"][0][0]["document"]["id"] == TOP_DOC


def test_no_queries_no_results(server):
    assert call(server.retrieve_url, {"queries": [], "topk": 3})[:2] == (200, {"result": []})


def test_health(server, searcher):
    status, body, _ = call(server.url + "/health", method="GET")
    assert status == 200
    assert body["status"] == "ok" and body["corpus"] == "scifact" and body["retriever"] == "bm25"
    assert body["documents"] == len(searcher.documents) == 5183 and body["topk"] == 3


def test_concurrent_clients_all_answered_right(server, searcher, scifact):
    queries = list(scifact.queries.values())[:16]
    expected = dict(zip(queries, searcher.search(queries, 10)))
    failures: list[str] = []

    def client(n: int) -> None:
        for i in range(6):
            batch = [queries[(n + i + j) % len(queries)] for j in range(3)]
            status, body, _ = call(server.retrieve_url, {"queries": batch, "topk": 10, "return_scores": True})
            got = [[(hit["document"]["id"], hit["score"]) for hit in hits] for hits in body.get("result", [])]
            if status != 200 or got != [expected[q] for q in batch]:
                failures.append(f"client {n} request {i}: {status}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads) and failures == []


# --- refusals ------------------------------------------------------------------------------------------------


def test_bad_json_is_400_naming_the_problem(server):
    status, body, _ = call(server.retrieve_url, data=b'{"queries": ["a"], "topk": 3')
    assert status == 400
    assert body["error"].startswith("the request body is not valid JSON: Expecting ',' delimiter")
    status, body, _ = call(server.retrieve_url, data=b'{"queries": ["\xff"]}')
    assert status == 400 and "not UTF-8" in body["error"]


@pytest.mark.parametrize(("payload", "message"), [
    ({"queries": "aspirin"}, "'queries' must be a list of strings, got a string"),
    ({"queries": ["aspirin", 7]}, "'queries'[1] must be a string, got a number"),
    ({"queries": [["nested"]]}, "'queries'[0] must be a string, got a list"),
    ({"topk": 3}, "field 'queries' is required"),
    (["aspirin"], "the request body must be a JSON object"),
    ({"queries": ["a"], "topk": "5"}, "'topk' must be a whole number or null, got a string"),
    ({"queries": ["a"], "topk": 2.5}, "'topk' must be a whole number or null, got a number (2.5)"),
    ({"queries": ["a"], "topk": True}, "'topk' must be a whole number or null, got a boolean"),
    ({"queries": ["a"], "return_scores": "yes"}, "'return_scores' must be true or false, got a string"),
])
def test_wrong_shapes_and_types_are_422(server, payload, message):
    status, body, _ = call(server.retrieve_url, payload)
    assert status == 422 and body["error"].startswith(message)


@pytest.mark.parametrize("topk", [-1, MAX_TOP_K + 1])
def test_topk_out_of_range_is_400(server, topk):
    status, body, _ = call(server.retrieve_url, {"queries": ["a"], "topk": topk})
    assert status == 400 and f"between 1 and {MAX_TOP_K}" in body["error"] and str(topk) in body["error"]
    assert call(server.retrieve_url, {"queries": ["a"], "topk": MAX_TOP_K})[0] == 200


def test_too_many_queries_is_413(server):
    status, body, _ = call(server.retrieve_url, {"queries": ["a"] * (MAX_QUERIES + 1)})
    assert status == 413 and f"{MAX_QUERIES + 1} queries" in body["error"] and str(MAX_QUERIES) in body["error"]
    assert call(server.retrieve_url, {"queries": ["a"] * MAX_QUERIES})[0] == 200


def test_body_over_the_limit_is_413(searcher):
    with RetrievalServer(searcher, port=0, max_body=2000) as small:
        status, body, headers = call(small.retrieve_url, {"queries": ["bovine spongiform " * 20] * 20})
        assert status == 413 and "the limit is 2000" in body["error"] and headers["Connection"] == "close"
        # announced with Expect: 100-continue, the body is refused before it is sent
        connection = http.client.HTTPConnection("127.0.0.1", small.bound_port, timeout=30)
        connection.putrequest("POST", "/retrieve")
        connection.putheader("Content-Length", str(10**9))
        connection.putheader("Expect", "100-continue")
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413 and f"{10**9} bytes" in json.loads(response.read())["error"]
        connection.close()
        assert call(small.retrieve_url, {"queries": [QUERY], "topk": 1})[0] == 200


def test_the_default_body_limit_is_1_mib(server):
    status, body, _ = call(server.retrieve_url, {"queries": ["x" * MAX_BODY]})
    assert status == 413 and f"the limit is {MAX_BODY}" in body["error"]


def test_no_content_length_is_411(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.bound_port, timeout=30)
    connection.putrequest("POST", "/retrieve")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and "Content-Length" in json.loads(response.read())["error"]
    connection.close()


def test_unknown_path_404_and_wrong_method_405(server):
    status, body, _ = call(server.url + "/search", method="GET")
    assert status == 404 and "POST /retrieve" in body["error"]
    status, body, _ = call(server.url + "/search", {"queries": ["a"]})
    assert status == 404
    status, body, headers = call(server.retrieve_url, method="GET")
    assert status == 405 and headers["Allow"] == "POST" and "POST only" in body["error"]
    status, body, headers = call(server.url + "/health", {"queries": ["a"]})
    assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_keep_alive_connection_serves_several_requests(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.bound_port, timeout=30)
    for topk in (1, 2, 3):
        connection.request("POST", "/retrieve", body=json.dumps({"queries": [QUERY], "topk": topk}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and len(json.loads(response.read())["result"][0]) == topk
    connection.request("POST", "/retrieve", body=b"{oops")  # a refused request whose body was read: still open
    response = connection.getresponse()
    assert response.status == 400 and json.loads(response.read())["error"].startswith("the request body is not valid")
    connection.request("GET", "/health")
    assert connection.getresponse().status == 200
    connection.close()


# --- the Python API ------------------------------------------------------------------------------------------


def test_start_stop_and_port_0(searcher):
    server = RetrievalServer(searcher, port=0, default_top_k=2)
    url = server.start()
    port = server.bound_port
    assert url == f"http://127.0.0.1:{port}/retrieve" and port != 0
    assert len(call(url, {"queries": [QUERY]})[1]["result"][0]) == 2
    server.stop()
    server.stop()  # twice: nothing happens
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url.replace("/retrieve", "/health"), timeout=5)


def test_serve_forever_returns_when_stopped_from_another_thread(searcher):
    server = RetrievalServer(searcher, port=0)
    server.bind()
    stopper = threading.Timer(0.3, server.stop)
    stopper.start()
    began = time.monotonic()
    server.serve_forever()
    assert time.monotonic() - began < 30 and server._socket is None


def test_a_port_in_use_is_exit_6_and_bad_options_exit_2(searcher):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ProviderError, match="address already in use|Address already in use") as info:
            RetrievalServer(searcher, port=taken.getsockname()[1]).bind()
        assert info.value.exit_code == 6
    for bad in ({"default_top_k": 0}, {"default_top_k": MAX_TOP_K + 1}, {"port": 70000}, {"max_body": 0},
                {"max_queries": 0}):
        with pytest.raises(UsageError):
            RetrievalServer(searcher, **bad)


def test_a_non_loopback_host_warns(searcher, caplog):
    server = RetrievalServer(searcher, host="0.0.0.0", port=0)
    with caplog.at_level(logging.WARNING, logger="r2med.agent.server"):
        server.bind()
    server.stop()
    assert any("other machines can reach" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="r2med.agent.server"):
        RetrievalServer(searcher, port=0).bind()
    assert not caplog.records


def test_a_failed_search_is_500_and_the_server_goes_on(searcher, monkeypatch):
    with RetrievalServer(searcher, port=0) as server:
        calls = []

        def boom(texts, k):
            calls.append(texts)
            raise RuntimeError("index gone")

        monkeypatch.setattr(searcher, "_search", boom)
        status, body, _ = call(server.retrieve_url, {"queries": ["a"]})
        assert status == 500 and "index gone" in body["error"] and calls
        monkeypatch.undo()
        assert call(server.retrieve_url, {"queries": [QUERY]})[0] == 200


def test_requests_in_progress_do_not_block_others_and_finish_before_stop(searcher, monkeypatch):
    release, entered = threading.Event(), threading.Event()
    search = searcher._search

    def slow(texts, k):
        entered.set()
        assert release.wait(30)
        return search(texts, k)

    server = RetrievalServer(searcher, port=0)
    url = server.start()
    monkeypatch.setattr(searcher, "_search", slow)
    answers: list = []
    client = threading.Thread(target=lambda: answers.append(call(url, {"queries": [QUERY], "topk": 1})))
    client.start()
    assert entered.wait(30)
    assert call(server.url + "/health", method="GET")[0] == 200  # answered while the search is running
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    time.sleep(0.3)
    assert stopper.is_alive() and not answers  # stop() waits for the request in progress
    release.set()
    stopper.join(30)
    client.join(30)
    assert not stopper.is_alive() and answers[0][0] == 200
    assert answers[0][1]["result"][0][0]["id"] == TOP_DOC


# --- the command ---------------------------------------------------------------------------------------------


def test_cli_defaults_match_the_servers():
    from r2med.agent import server

    assert (serve_cli.DEFAULT_HOST, serve_cli.DEFAULT_PORT, serve_cli.DEFAULT_TOP_K) == (
        server.DEFAULT_HOST, server.DEFAULT_PORT, server.DEFAULT_TOP_K) == ("127.0.0.1", 8000, 3)
    assert (serve_cli.MAX_TOP_K, serve_cli.MAX_QUERIES, serve_cli.MAX_BODY) == (MAX_TOP_K, MAX_QUERIES, MAX_BODY)
    assert (serve_cli.MAX_RESPONSE, serve_cli.BODY_TIMEOUT, serve_cli.MAX_SEARCHES, serve_cli.MAX_CONNECTIONS) == (
        server.MAX_RESPONSE, server.BODY_TIMEOUT, server.MAX_SEARCHES, server.MAX_CONNECTIONS) == (32 << 20, 30.0, 4, 512)
    check_options(port=0, default_top_k=3, max_top_k=MAX_TOP_K, max_body=MAX_BODY, max_queries=MAX_QUERIES)


def test_cli_help(cli):
    result = cli("serve", "--help")
    assert result.code == 0
    for flag in ("--task", "--knowledge-dir", "--data-dir", "--retriever", "--host", "--port", "--top-k",
                 "--max-queries", "--no-cache", "POST /retrieve"):
        assert flag in result.out


@pytest.mark.parametrize(("args", "message"), [
    ((), "name the corpus to serve: --task DATASET"),
    (("--knowledge-dir", "kb", "--task", "scifact"), "--knowledge-dir names the corpus to serve"),
    (("--task", "scifact", "--top-k", "2000"), "the default top k must be between 1 and 1000"),
])
def test_cli_usage_errors_exit_2_before_any_work(cli, args, message):
    result = cli("serve", *args)
    assert result.code == 2 and message in result.err


def test_cli_corpus_choice(tmp_path):
    from types import SimpleNamespace

    from r2med.settings import get_settings

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "corpus.jsonl").write_text('{"_id": "a", "title": "T", "text": "x y"}\n{"_id": "b", "text": "z"}\n')
    corpus, source = serve_cli.load_serve_corpus(SimpleNamespace(knowledge_dir=kb, task=None, data_dir=None),
                                                 get_settings())
    assert corpus.name == "kb" and corpus.doc_ids == ["a", "b"] and source == str(kb)
    scifact = shared_path("data", "scifact")
    corpus, source = serve_cli.load_serve_corpus(SimpleNamespace(knowledge_dir=None, task=None, data_dir=scifact),
                                                 get_settings())
    assert corpus.name == "scifact" and len(corpus.doc_ids) == 5183 and source == "dataset"
    (tmp_path / "two" / "a").mkdir(parents=True)
    (tmp_path / "two" / "b").mkdir()
    for name in ("a", "b"):
        for file in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
            (tmp_path / "two" / name / file).write_text(
                {"corpus.jsonl": '{"id": "d", "text": "t"}\n', "query.jsonl": '{"id": "q", "text": "t"}\n',
                 "qrels.jsonl": '{"q_id": "q", "p_id": "d", "score": 1}\n'}[file])
    with pytest.raises(UsageError, match=r"holds 2 datasets \(a, b\); name the one to serve with --task"):
        serve_cli.load_serve_corpus(SimpleNamespace(knowledge_dir=None, task=None, data_dir=tmp_path / "two"),
                                    get_settings())


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_cli_serves_until_interrupted_then_exits_0(isolated_home, stop):
    scifact = shared_path("data", "scifact")
    env = {**os.environ, "R2MED_HOME": str(isolated_home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "r2med.cli", "serve", "--data-dir", str(scifact), "--task", "scifact", "--port", "0",
            "--top-k", "4"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:  # stderr: progress bars, then the one "serving" line, then "stopped serving"
        for line in proc.stderr:
            lines.append(line)
            if "r2med: serving" in line:
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert found.wait(120), "".join(lines)
        line = next(line for line in lines if "r2med: serving" in line)
        match = re.search(r"r2med: serving bm25 over scifact \(5183 documents\) at (http://127\.0\.0\.1:(\d+)/retrieve)$",
                          line.strip())
        assert match, line
        url, port = match.group(1), int(match.group(2))
        assert port != 0
        for _ in range(100):  # listening before it prints; polled all the same
            try:
                status, health, _ = call(f"http://127.0.0.1:{port}/health", method="GET")
                break
            except urllib.error.URLError:
                time.sleep(0.1)
        assert status == 200 and health["documents"] == 5183 and health["topk"] == 4
        status, body, _ = call(url, {"queries": [QUERY], "return_scores": True})
        assert status == 200 and [hit["document"]["id"] for hit in body["result"][0]] == [
            doc for doc, _ in official_top5("5")[:4]]
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    assert "r2med: stopped serving" in "".join(lines)
    assert proc.stdout is not None and proc.stdout.read() == ""
    assert (Path(isolated_home) / "indexes" / "bm25").is_dir()  # the index cached under R2MED_HOME


def test_without_the_serve_extra_exit_3_naming_it(searcher, monkeypatch):
    from r2med.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn raises ImportError
    with pytest.raises(MissingExtraError, match=re.escape(install_command("serve"))) as info:
        RetrievalServer(searcher, port=0)
    assert info.value.exit_code == 3


def test_a_signal_asyncio_swallowed_is_still_an_interrupt(searcher, monkeypatch):
    """uvicorn re-raises a caught SIGINT, which asyncio.run's own handler turns into a cancellation of its main task;
    a task that ends before it sees it makes asyncio.run return normally (CI saw `r2med serve` exit 0 without its
    'stopped serving' line). serve_forever still raises KeyboardInterrupt when uvicorn caught a signal, and returns
    when it did not (stop() from another thread)."""

    def served(captured):
        def run(self, server):
            server._captured_signals = list(captured)  # what uvicorn records in its signal handler

        return run

    monkeypatch.setattr(RetrievalServer, "_run", served([signal.SIGINT]))
    with pytest.raises(KeyboardInterrupt):
        RetrievalServer(searcher, port=0).serve_forever()
    monkeypatch.setattr(RetrievalServer, "_run", served([]))
    RetrievalServer(searcher, port=0).serve_forever()  # returns: stopped, not interrupted
