"""``r2med serve`` against hostile clients: malformed and conflicting framing, slow bodies, pipelining, many slow
clients, 200 concurrent requests, oversized and amplifying requests; and the server's peak memory.

One ``r2med serve`` subprocess over SciFact's BM25 (``--body-timeout 1``, so that the 408 comes fast); the
malformed cases are written on raw sockets. Timing is only ever checked with generous margins.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, shared_path

pytest.importorskip("uvicorn", reason="r2med serve needs the serve extra")

BODY_TIMEOUT = 1.0
#: the stated bound of the server's peak resident memory (VmHWM) over this whole module
PEAK_RSS_MB = 500
QUERY = "1/2000 in UK have abnormal PrP positivity."


def official(qid: str, k: int) -> list[str]:
    rows = [line.split() for line in shared_path("data", "scifact", "official_bm25.run").read_text().splitlines()]
    return [row[2] for row in rows if row[0] == qid][:k]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(port, process, stderr lines)`` of one ``r2med serve`` subprocess."""
    home = tmp_path_factory.mktemp("serve_home")
    env = {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "r2med.cli", "serve", "--data-dir", str(shared_path("data", "scifact")),
            "--port", "0", "--body-timeout", str(BODY_TIMEOUT), "--max-searches", "2"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "r2med: serving" in line:
                found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert found.wait(180), "".join(lines)
        port = int(re.search(r":(\d+)/retrieve", next(x for x in lines if "r2med: serving" in x)).group(1))
        yield port, proc, lines
    finally:
        proc.terminate()
        proc.wait(60)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    return sock


def read_response(reader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response ``(status, headers with lower-case names, body)`` from a socket's reader."""
    status_line = reader.readline()
    if not status_line:
        raise EOFError("the server closed the connection")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, reader.read(int(headers["content-length"]))
    return status, headers, reader.read() if headers.get("connection") == "close" else b""  # until the server closes


def exchange(port: int, raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Every response to ``raw`` until the server closes the connection (or goes quiet for 5 s)."""
    with connect(port) as sock:
        sock.sendall(raw)
        sock.settimeout(5)
        reader = sock.makefile("rb")
        answers = []
        try:
            while True:
                answers.append(read_response(reader))
        except (EOFError, TimeoutError, ConnectionResetError):
            return answers


def post(body: bytes, *extra: str, close: bool = True) -> bytes:
    headers = [f"Content-Length: {len(body)}", "Content-Type: application/json", *extra]
    if close:
        headers.append("Connection: close")
    return ("POST /retrieve HTTP/1.1\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


def payload(queries: list[str], topk: int = 3) -> bytes:
    return json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()


# --- framing -------------------------------------------------------------------------------------------------


def test_a_content_length_that_is_not_ascii_digits_is_400_and_one_answer(served):
    port = served[0]
    body = payload([QUERY])
    raw = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: \xc2\xb2\r\n\r\n" + body
    answers = exchange(port, raw)
    assert [status for status, _, _ in answers] == [400]  # uvicorn's, in plain text; then it closes
    assert answers[0][1]["connection"] == "close" and answers[0][2] == b"Invalid HTTP request received."


def test_two_different_content_lengths_are_400_and_the_rest_is_not_a_second_request(served):
    port = served[0]
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b'{"queries": []}' + smuggled
    raw = (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: "
           + str(len(body)).encode() + b"\r\n\r\n" + body)
    answers = exchange(port, raw)
    assert answers[0][1]["connection"] == "close"
    assert [status for status, _, _ in answers] == [400]  # no 200 for the smuggled GET /health


def test_put_gets_one_405_with_allow_and_the_connection_goes_on(served):
    port = served[0]
    body = payload([QUERY])
    put = post(body, close=False).replace(b"POST ", b"PUT ", 1)
    answers = exchange(port, put + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert [status for status, _, _ in answers] == [405, 200]
    status, headers, text = answers[0]
    assert status == 405 and headers["allow"] == "POST"
    assert json.loads(text) == {"error": "/retrieve answers POST only, not PUT"}


@pytest.mark.parametrize("method", ["FOO", "TRACE", "PROPFIND", "DELETE", "OPTIONS"])
def test_any_other_method_is_405_with_allow(served, method):
    port = served[0]
    answers = exchange(port, f"{method} /retrieve HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert [(status, headers["allow"]) for status, headers, _ in answers] == [(405, "POST")]
    assert json.loads(answers[0][2])["error"] == f"/retrieve answers POST only, not {method}"
    answers = exchange(port, f"{method} /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert [(status, headers["allow"]) for status, headers, _ in answers] == [(405, "GET, HEAD")]


def test_expect_100_continue_gets_100_then_the_answer(served):
    port = served[0]
    body = payload([QUERY], topk=2)
    with connect(port) as sock:
        head = post(body, "Expect: 100-continue")[: -len(body)]
        sock.sendall(head)
        reader = sock.makefile("rb")
        assert reader.readline().startswith(b"HTTP/1.1 100 ")
        assert reader.readline() == b"\r\n"
        sock.sendall(body)
        status, _, text = read_response(reader)
    assert status == 200 and [hit["document"]["id"] for hit in json.loads(text)["result"][0]] == official("5", 2)


def test_expect_100_continue_over_the_body_limit_is_413_at_once(served):
    port = served[0]
    with connect(port) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n")
        status, headers, text = read_response(sock.makefile("rb"))
    assert status == 413 and "1000000000 bytes" in json.loads(text)["error"] and headers["connection"] == "close"


def test_a_dripped_body_gets_408_and_the_connection_is_closed(served):
    port = served[0]
    body = payload([QUERY])
    with connect(port) as sock:
        sock.sendall(post(body)[: -len(body)])
        began = time.monotonic()
        reader = sock.makefile("rb")
        answer = None
        for byte in body:  # one byte every 0.5 s: each arrives well within any read timeout
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([sock], [], [], 0.5)[0]:
                answer = read_response(reader)
                break
        elapsed = time.monotonic() - began
    assert answer is not None, "no answer to a body dripped for the whole of its length"
    status, headers, text = answer
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(text) == {"error": f"the request body did not arrive within {BODY_TIMEOUT:g} s"}
    assert elapsed < BODY_TIMEOUT + 15  # a deadline, not a read timeout (generous margin)


def test_pipelined_requests_are_answered_in_order(served):
    port = served[0]
    raw = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post(payload([QUERY], 1), close=False)
           + post(b"{oops", close=False) + post(payload([QUERY], 3)))
    answers = exchange(port, raw)
    assert [status for status, _, _ in answers] == [200, 200, 400, 200]
    assert json.loads(answers[0][2])["documents"] == 5183
    assert [len(json.loads(answers[i][2])["result"][0]) for i in (1, 3)] == [1, 3]


# --- load ----------------------------------------------------------------------------------------------------


def test_a_client_is_answered_while_50_slow_ones_hold_connections(served):
    port = served[0]
    slow = []
    try:
        for i in range(50):  # half stuck in their headers, half in their bodies
            sock = connect(port)
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n" if i % 2 else post(b"x" * 100)[:-90])
            slow.append(sock)
        began = time.monotonic()
        answers = exchange(port, post(payload([QUERY], 3)))
        assert time.monotonic() - began < 30  # generous: answered at once in practice
        assert [status for status, _, _ in answers] == [200]
        assert [hit["document"]["id"] for hit in json.loads(answers[0][2])["result"][0]] == official("5", 3)
    finally:
        for sock in slow:
            sock.close()


def test_200_concurrent_requests_all_answered_right(served):
    port = served[0]
    rows = [json.loads(line) for line in shared_path("data", "scifact", "query.jsonl").read_text().splitlines()]
    rows = rows[:200]

    def one(row: dict) -> tuple[str, int, list[str]]:
        answers = exchange(port, post(payload([row["text"]], 3)))
        status, _, text = answers[0] if answers else (0, {}, b"")
        ids = [hit["document"]["id"] for hit in json.loads(text)["result"][0]] if status == 200 else []
        return row["id"], status, ids

    with ThreadPoolExecutor(200) as pool:
        results = list(pool.map(one, rows))
    assert len(results) == 200 and {status for _, status, _ in results} == {200}
    wrong = [qid for qid, _, ids in results if ids != official(qid, 3)]
    assert wrong == []


# --- limits --------------------------------------------------------------------------------------------------


def test_a_body_over_the_limit_and_too_many_queries_are_413(served):
    port = served[0]
    status, _, text = exchange(port, post(payload(["x" * (1 << 20)])))[0]
    assert status == 413 and "the limit is 1048576" in json.loads(text)["error"]
    status, _, text = exchange(port, post(payload(["a"] * 1025)))[0]
    assert status == 413 and "1025 queries in one request; the limit is 1024" in json.loads(text)["error"]


@pytest.mark.parametrize(("queries", "topk"), [(1000, 1000), (1024, 1000), (24, 1000)])
def test_an_amplifying_request_is_413_before_searching(served, queries, topk):
    port = served[0]
    body = payload([QUERY] * queries, topk)
    assert len(body) < 64 * 1024  # well within the body and query limits
    status, _, text = exchange(port, post(body))[0]
    error = json.loads(text)["error"]
    assert status == 413 and error.startswith(f"the answer to {queries} queries with topk {topk} could take ")
    assert "the limit is 33554432 bytes (r2med serve --max-response)" in error
    # every query counts (repeated texts too): the bound is queries x the bytes of one query's list
    need, per_query = map(int, re.search(r"could take (\d+) bytes \(up to (\d+) per query", error).groups())
    assert need == queries * per_query + 14


def test_a_request_inside_the_response_bound_is_answered_and_not_larger(served):
    port = served[0]
    status, _, text = exchange(port, post(payload([QUERY], 1000)))[0]
    assert status == 200 and len(json.loads(text)["result"][0]) == 1000
    error = json.loads(exchange(port, post(payload([QUERY] * 1000, 1000)))[0][2])["error"]
    per_query = int(re.search(r"up to (\d+) per query", error).group(1))
    assert len(text) <= per_query + 14  # the bound holds for the largest answer one query can get


# --- last: what it all cost ----------------------------------------------------------------------------------


def test_zz_peak_memory_is_bounded_and_no_traceback(served):
    port, proc, lines = served
    assert proc.poll() is None  # still serving after all of the above
    assert [status for status, _, _ in exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")] == [200]
    status = Path(f"/proc/{proc.pid}/status")
    if not status.exists():
        pytest.skip("no /proc on this platform")
    peak_kb = int(re.search(r"VmHWM:\s+(\d+) kB", status.read_text()).group(1))
    print(f"r2med serve: peak RSS {peak_kb // 1024} MB")
    assert peak_kb < PEAK_RSS_MB * 1024, f"peak RSS {peak_kb // 1024} MB"
    assert "Traceback" not in "".join(lines)
