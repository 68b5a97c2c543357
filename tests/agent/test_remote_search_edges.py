"""``r2med agent --search-with URL`` against retrieval servers that do not keep the API's promises (issue 35).

A server's answer is cut to ``topk`` distinct documents (the server's order): one that ignores ``topk`` or repeats a
document gets the ranking of one that obeys. A score that is not a finite number or an id a run file cannot hold
is refused like a malformed answer: retried, then the query fails naming the server, before the LLM is asked for
another turn. An agent that searches a server writes its own expansion folder (``<llm>@server-HOST_PORT_PATH``),
never the BM25 agent's of the same ``--llm-name``; whatever the agent writes is strict JSON.

The LLM is the scripted completion server (``completion_server.py``); the retrieval server a real one on 127.0.0.1
whose answers each test scripts (``Retrieval``). The dataset is ``tests/data/tiny`` (3 queries, 4 documents; q1
judges d1 and d4, q2 judges d2).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from completion_server import CompletionServer

from conftest import DATA

R1 = ("--protocol", "search-r1-infer", "--llm-model", "test-model", "--chat-template", "chatml")
#: the tiny corpus ranked as the scripted server ranks it for every query, then 307 ids the corpus does not hold
RANKING = ["d2", "d3", "d1", "d4"] + [f"x{i}" for i in range(5, 312)]


def entry(docid: Any, score: Any = 1.0) -> dict[str, Any]:
    return {"document": {"id": docid, "contents": f'"{docid}"\ntext of {docid}'}, "score": score}


def obedient(query: str, topk: int) -> list[dict[str, Any]]:
    return [entry(d, 10.0 - i) for i, d in enumerate(RANKING[:topk])]


class Retrieval:
    """A Search-R1-shaped ``/retrieve`` on 127.0.0.1: ``results(query, topk)`` gives each query's list, or ``raw``
    the whole body (bytes: JSON's ``NaN`` literal and the like). ``requests`` records each request's body."""

    def __init__(self, results: Callable[[str, int], list[dict[str, Any]]] = obedient,
                 raw: Callable[[dict[str, Any]], bytes] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner.requests.append(body)
                data = raw(body) if raw is not None else json.dumps(
                    {"result": [results(q, body["topk"]) for q in body["queries"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/retrieve"
        self.name = f"server-127.0.0.1_{self.port}_retrieve"

    def __enter__(self) -> Retrieval:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def data(tmp_path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(DATA / "tiny", folder / "Biology")
    return folder


def _agent(cli, data: Path, out: Path, *extra: object, llm: CompletionServer | None = None):
    def go(server: CompletionServer):
        return cli("agent", *R1, "--base-url", server.base_url, "--max-retries", "1", "--timeout", "5",
                   "--data-dir", data, "--output", out, *extra)

    if llm is not None:
        return go(llm)
    with CompletionServer() as server:
        return go(server)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [_strict(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _strict(text: str) -> Any:
    """JSON as a strict reader (RFC 8259) takes it: ``NaN`` and ``Infinity`` refused."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------------------------- topk and repeats


def test_a_server_that_ignores_topk_gets_the_ranking_of_one_that_obeys(cli, data, tmp_path, isolated_home):
    """311 documents for topk 3 used to enter the agent's ranking whole: R@100 100.00 where the obedient server's
    gives 75.00 (q1 finds d1 of its {d1, d4}: 0.5; q2 finds d2: 1.0)."""
    with Retrieval(obedient) as good:
        fair = _agent(cli, data, tmp_path / "fair", "--search-with", good.url, "--json")
    with Retrieval(lambda q, k: [entry(d, 400.0 - i) for i, d in enumerate(RANKING)]) as greedy:
        result = _agent(cli, data, tmp_path / "greedy", "--search-with", greedy.url, "--json")
    assert fair.code == 0, fair.err
    assert result.code == 0, result.err
    assert all(request["topk"] == 3 for request in greedy.requests)
    assert fair.json()["scores"]["Biology"]["recall_at_100"] == pytest.approx(0.75)
    assert result.json()["scores"]["Biology"] == fair.json()["scores"]["Biology"]
    folder = tmp_path / "greedy" / "agent" / "search-r1" / "test-model" / greedy.name
    rows = _rows(folder / "Biology.trajectories.jsonl")
    searches = [s for row in rows for s in row["searches"]]
    assert searches and all(s["ids"] == ["d2", "d3", "d1"] and s["scores"] == [400.0, 399.0, 398.0] for s in searches)
    # counted and said once: 308 results past topk in each search
    report = result.json()["agent"]["Biology"]
    assert report["search_cut"] == {"repeated": 0, "beyond_topk": 308 * report["search_calls"]}
    assert result.err.count("sent more than was asked") == 1
    assert (f"the retrieval server {greedy.url} sent more than was asked: {308 * report['search_calls']} results past "
            f"topk 3 and 0 repeats of a document already listed in {report['search_requests']} requests; the agent "
            "kept the first 3 distinct documents of each search") in result.err


def test_a_repeated_document_counts_once(cli, data, tmp_path, isolated_home):
    """``d2, d2, d3, d2, d1, d4`` for topk 3: the agent keeps d2, d3, d1 (first occurrences, the server's order) and
    RRF fuses three documents, not d2 three times."""
    with Retrieval(obedient) as good:
        fair = _agent(cli, data, tmp_path / "fair", "--search-with", good.url, "--json")
    scores = iter(range(100, 0, -1))
    with Retrieval(lambda q, k: [entry(d, float(next(scores))) for d in ["d2", "d2", "d3", "d2", "d1", "d4"]]) as echo:
        result = _agent(cli, data, tmp_path / "echo", "--search-with", echo.url, "--json")
    assert result.code == 0, result.err
    rows = _rows(tmp_path / "echo" / "agent" / "search-r1" / "test-model" / echo.name / "Biology.trajectories.jsonl")
    searches = [s for row in rows for s in row["searches"]]
    assert searches and all(s["ids"] == ["d2", "d3", "d1"] for s in searches)
    report = result.json()["agent"]["Biology"]
    assert report["search_cut"] == {"repeated": 2 * report["search_calls"], "beyond_topk": report["search_calls"]}
    assert result.json()["scores"]["Biology"] == fair.json()["scores"]["Biology"]
    run = (tmp_path / "echo" / "agent" / "search-r1" / "test-model" / echo.name / "Biology.run").read_text()
    fair_run = (tmp_path / "fair" / "agent" / "search-r1" / "test-model" / good.name / "Biology.run").read_text()
    assert [line.split()[:4] for line in run.splitlines()] == [line.split()[:4] for line in fair_run.splitlines()]


# --------------------------------------------------------------------------------------------- numbers and ids


@pytest.mark.parametrize("score", ["NaN", "Infinity", "-Infinity", "1e999", "1" + "0" * 400])
def test_a_score_that_is_not_a_finite_number_fails_the_query_naming_the_server(cli, data, tmp_path, isolated_home,
                                                                                score):
    """JSON's ``NaN`` used to be written as the literal ``NaN`` into trajectories.jsonl (not JSON); now the answer
    is refused like a malformed one: retried, then the queries fail (exit 6) naming the server, and every file the
    agent wrote is strict JSON."""
    def raw(body: dict[str, Any]) -> bytes:
        lists = ", ".join('[{"document": {"id": "d1", "contents": "x"}, "score": %s}]' % score for _ in body["queries"])
        return ('{"result": [%s]}' % lists).encode()

    with Retrieval(raw=raw) as server:
        result = _agent(cli, data, tmp_path / "out", "--search-with", server.url)
    assert result.code == 6, result.err
    assert "Traceback" not in result.err
    assert (f"retrieval server: POST {server.url} still failing after 2 attempts (1 retries); last error: a result's "
            "score is not a finite number (a ranking needs numbers)") in result.err
    assert len(server.requests) == 2  # the queries' searches in one request, sent twice
    folder = isolated_home / "expansions" / "Biology" / "search-r1" / f"test-model@{server.name}"
    for path in [folder / "trajectories.jsonl"]:
        rows = _rows(path)  # strict: raises on NaN
        assert len(rows) == 3 and all(row["stop_reason"] == "error" and row["searches"] == [] for row in rows)
    _strict((folder / "summary.json").read_text())


@pytest.mark.parametrize(("docid", "problem"), [
    ("d 1", "contains white space U+0020 (SPACE) at character 2"),
    ("d\t1", "contains white space U+0009 (TAB) at character 2"),
    ("", "is empty"),
    ("d\u200b1", "contains an invisible format character U+200B (ZERO WIDTH SPACE) at character 2"),
])
def test_an_id_a_run_file_cannot_hold_is_refused_at_the_search(cli, data, tmp_path, isolated_home, docid, problem):
    """Found only after every paid LLM call, as "fix the id" (the user cannot): now the search's answer is refused,
    naming the server and the id, and no query asks the LLM for a turn after its first search."""
    with Retrieval(lambda q, k: [entry("d2", 2.0), entry(docid, 1.0)]) as server, CompletionServer() as llm:
        result = _agent(cli, data, tmp_path / "out", "--search-with", server.url, llm=llm)
    assert result.code == 6, result.err
    assert "Traceback" not in result.err
    shown = json.dumps(docid)  # ASCII: an invisible character shows as its escape
    assert (f"retrieval server: POST {server.url} still failing after 2 attempts (1 retries); last error: document id "
            f"{shown} {problem}; a TREC run line cannot hold it") in result.err
    assert "fix the id" not in result.err
    assert len(llm.requests) == 3  # each query's first turn (its first search), nothing after


# --------------------------------------------------------------------------------------------- folders


def test_a_server_agent_has_its_own_expansion_folder(cli, data, tmp_path, isolated_home):
    """The same --llm-name searching BM25 and then a server: two folders, the BM25 one untouched (it used to be
    replaced, its response cache shared); ``r2med run --expansion`` finds the server agent's by the printed name."""
    out = tmp_path / "out"
    base = isolated_home / "expansions" / "Biology" / "search-r1"
    assert _agent(cli, data, out, "--llm-name", "mine").code == 0
    bm25 = {p.name: p.read_bytes() for p in (base / "mine").iterdir() if p.is_file()}
    assert "query_with_hydoc.jsonl" in bm25
    with Retrieval(lambda q, k: [entry("d3", 1.0)]) as server:
        result = _agent(cli, data, out, "--llm-name", "mine", "--search-with", server.url)
    assert result.code == 0, result.err
    assert {p.name: p.read_bytes() for p in (base / "mine").iterdir() if p.is_file()} == bm25
    folder = base / f"mine@{server.name}"
    assert (folder / "query_with_hydoc.jsonl").is_file() and (folder / "agent-cache.jsonl").is_file()
    assert (f"Biology: expansions {folder / 'query_with_hydoc.jsonl'} (r2med run --expansion "
            f"search-r1/mine@{server.name})") in result.err
    searched = _rows(folder / "trajectories.jsonl")
    assert {tuple(s["ids"]) for row in searched for s in row["searches"]} == {("d3",)}
    used = cli("run", "--retriever", "bm25", "--expansion", f"search-r1/mine@{server.name}", "--data-dir", data,
               "--output", out, "--json")
    assert used.code == 0, used.err
    assert (out / "gar" / "search-r1" / f"mine@{server.name}" / "bm25" / "Biology.json").is_file()


def test_the_folder_of_each_searcher():
    from r2med.store.expansions import agent_folder_name

    assert agent_folder_name("m", "bm25") == "m"  # the folders r2med has always written
    assert agent_folder_name("m", "bm25-lucene") == "m@bm25-lucene"
    assert agent_folder_name("m", "e5-mistral-7b") == "m@e5-mistral-7b"
    # "m-e5" with BM25 and "m" with e5 used to meet in a "-" join; '@' is never in an LLM folder name
    assert agent_folder_name("m-e5", "bm25") != agent_folder_name("m", "e5")


def test_what_the_agent_writes_is_strict_json(tmp_path):
    from r2med.agent.outputs import write_strict
    from r2med.errors import InvalidInputError

    path = tmp_path / "t.jsonl"
    write_strict(path, [{"a": 1.5, "t": "é \ud800"}])
    assert _rows(path) == [{"a": 1.5, "t": "é \ud800"}]  # a lone surrogate kept as its escape
    with pytest.raises(InvalidInputError, match=r"t2.jsonl: not written: Out of range float values are not JSON "
                                                r"compliant.*a strict reader refuses NaN and Infinity"):
        write_strict(tmp_path / "t2.jsonl", [{"a": 1.0}, {"a": float("nan")}])
    assert not (tmp_path / "t2.jsonl").exists() and [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
    with pytest.raises(InvalidInputError):
        write_strict(tmp_path / "s.json", document={"x": float("inf")})
