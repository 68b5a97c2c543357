"""``r2med serve`` in bounded memory per connection (issue 35, finding 8), and the streamed answer's bytes.

20 clients that post 13 queries at ``topk`` 1000 (inside every limit) and never read the answer grew the server by
~27-38 MB each (SciFact: 187 -> 731 MB for 20), as each answer was encoded whole and held (its bytes, and their copy
in the connection's write buffer). Now the hits are held as arrays and the JSON is made a 64 KiB piece at a time as
the connection takes it (``r2med.agent.retrieve_stream``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO
from r2med.agent.retrieve_api import ResponseBound, entry_bytes, retrieve
from r2med.agent.retrieve_stream import ANSWER_CHUNK, CorpusEntries, StreamedAnswer, search_hits
from r2med.agent.search import CorpusSearcher

CLIENTS, QUERIES, TOPK = 20, 13, 1000


def searcher_of(documents: dict[str, str], ranking) -> CorpusSearcher:
    """A CorpusSearcher (the real class) whose search ranks ``documents`` by ``ranking(text, docid) -> score``."""
    import threading as th

    def search(texts, k):
        return [sorted(((d, ranking(t, d)) for d in documents), key=lambda x: (-x[1], x[0]))[:k] for t in texts]

    return CorpusSearcher("test", "corpus", "dataset", documents, {}, search, th.Lock())


TEXT = st.text(st.characters(codec="utf-8"), max_size=30)  # any text UTF-8 can hold (no lone surrogates)


@settings(max_examples=150, deadline=None)
@given(documents=st.dictionaries(TEXT.filter(bool), TEXT, min_size=1, max_size=12),
       queries=st.lists(st.sampled_from(["a", "b", "c", "ab"]), max_size=6), topk=st.integers(1, 15),
       return_scores=st.booleans(),
       scale=st.sampled_from([1.0, 1e-300, 1e300, -3.25, float("nan"), float("inf")]))
def test_streamed_bytes_are_json_dumps_of_the_answer(documents, queries, topk, return_scores, scale):
    searcher = searcher_of(documents, lambda text, docid: scale * (len(docid) + len(text) / 7))
    entries = CorpusEntries(documents)
    answer = StreamedAnswer(entries, search_hits(searcher, entries, queries, topk), return_scores)
    expected = json.dumps(retrieve(searcher, queries, topk, return_scores), ensure_ascii=False).encode("utf-8")
    assert b"".join(answer.chunks()) == expected
    assert answer.length == len(expected)
    assert list(ResponseBound(documents, 20, entries.sizes)._prefix) == list(ResponseBound(documents, 20)._prefix)


def test_pieces_are_bounded_and_repeats_searched_once():
    documents = {f"d{i}": "x" * 3000 for i in range(200)}
    searched: list[list[str]] = []
    base = searcher_of(documents, lambda text, docid: float(len(docid)))
    inner = base._search

    def counting(texts, k):
        searched.append(list(texts))
        return inner(texts, k)

    searcher = CorpusSearcher("test", "corpus", "dataset", documents, {}, counting, threading.Lock())
    entries = CorpusEntries(documents)
    hits = search_hits(searcher, entries, ["q", "r", "q"], 200)
    assert searched == [["q", "r"]] and hits[0] is hits[2]
    answer = StreamedAnswer(entries, hits, True)
    pieces = list(answer.chunks())
    # 600 entries of about 3070 bytes: every piece but the last at least 64 KiB and less than an entry more
    assert all(ANSWER_CHUNK <= len(p) < ANSWER_CHUNK + 3100 for p in pieces[:-1]) and len(pieces[-1]) <= ANSWER_CHUNK + 3100
    assert sum(map(len, pieces)) == answer.length and len(pieces) >= answer.length // (ANSWER_CHUNK + 3100)
    assert entry_bytes("d1", "x" * 3000) == 3000 + 4 + 10 + 73  # id "d1", contents "\"d1\"\nxx..."


def _rss_kb(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1))


@pytest.mark.slow
def test_clients_that_never_read_hold_little_memory(tmp_path):
    """20 raw sockets each POST 13 queries at topk 1000 on the bundled sample (574 documents: ~10 MB an answer) and
    never read. Each holds at most its hits (13 x 574 x 16 bytes, 120 KB), one 64 KiB piece and uvicorn's write
    buffer (64 KiB and a piece): bound 2 MB a connection, 40 MB for 20 (the whole answer, encoded and buffered,
    took ~2 x 10 MB a connection: 400 MB). Every answer, read at last, is the whole and right one."""
    pytest.importorskip("uvicorn", reason="r2med serve needs the serve extra")
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc on this platform")
    env = {**os.environ, "R2MED_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    data = tmp_path / "sample"
    subprocess.run([sys.executable, "-m", "r2med.cli", "datasets", "sample", str(data)], env=env, check=True,
                   capture_output=True)
    proc = subprocess.Popen([sys.executable, "-m", "r2med.cli", "serve", "--data-dir", str(data), "--port", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "r2med: serving" in line:
                found.set()

    threading.Thread(target=read, daemon=True).start()
    sockets: list[socket.socket] = []
    try:
        assert found.wait(180), "".join(lines)
        port = int(re.search(r":(\d+)/retrieve", "".join(lines)).group(1))
        texts = [json.loads(line)["text"] for line in (data / "scifact-sample" / "query.jsonl").read_text().splitlines()][:QUERIES]
        body = json.dumps({"queries": texts, "topk": TOPK, "return_scores": True}).encode()
        request = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body

        def whole_answer(sock: socket.socket) -> bytes:
            reader = sock.makefile("rb")
            head = []
            while (line := reader.readline()) not in (b"\r\n", b""):
                head.append(line)
            length = int(next(h for h in head if h.lower().startswith(b"content-length:")).split(b":")[1])
            return reader.read(length)

        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:  # one read: the answer, and warm
            sock.sendall(request)
            expected = whole_answer(sock)
        assert len(json.loads(expected)["result"]) == QUERIES and len(expected) > 5_000_000
        baseline = _rss_kb(proc.pid)
        for _ in range(CLIENTS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=120)  # the kernel's buffers take a few MB
            sock.sendall(request)
            sockets.append(sock)
        for sock in sockets:  # each answer has started: searched, headers sent, the stream paused at a full socket
            assert sock.recv(1, socket.MSG_PEEK) == b"H"
        grown_mb = (_rss_kb(proc.pid) - baseline) / 1024
        print(f"r2med serve: {baseline // 1024} MB, +{grown_mb:.1f} MB with {CLIENTS} clients that do not read")
        assert grown_mb < CLIENTS * 2, f"+{grown_mb:.1f} MB for {CLIENTS} clients that do not read"
        for sock in sockets:
            assert whole_answer(sock) == expected
    finally:
        for sock in sockets:
            sock.close()
        proc.terminate()
        proc.wait(60)
    assert "Traceback" not in "".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("holding", ["a body still arriving", "an answer not read"])
def test_sigterm_during_a_request_stops_with_one_line_and_exit_0(tmp_path, holding):
    """Issue 35 #13c: SIGTERM while a request is in progress (its body dripping, or its answer unread) wrote uvicorn's
    CancelledError traceback once the 10 s grace ran out. Now: one line, "stopped serving", exit 0."""
    import signal

    pytest.importorskip("uvicorn", reason="r2med serve needs the serve extra")
    env = {**os.environ, "R2MED_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    data = tmp_path / "sample"
    subprocess.run([sys.executable, "-m", "r2med.cli", "datasets", "sample", str(data)], env=env, check=True,
                   capture_output=True)
    proc = subprocess.Popen([sys.executable, "-m", "r2med.cli", "serve", "--data-dir", str(data), "--port", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "r2med: serving" in line:
                break
        port = int(re.search(r":(\d+)/retrieve", "".join(lines)).group(1))
        texts = [json.loads(line)["text"] for line in (data / "scifact-sample" / "query.jsonl").read_text().splitlines()]
        body = json.dumps({"queries": texts[:13], "topk": TOPK, "return_scores": True}).encode()
        head = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            if holding == "a body still arriving":
                sock.sendall(head + body[:10])
                time.sleep(0.5)  # the server reads the body (its deadline, --body-timeout, is 30 s)
            else:
                sock.sendall(head + body)
                assert sock.recv(1, socket.MSG_PEEK) == b"H"  # the answer has started and waits to be read
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rest == ("stopping: 1 request(s) still in progress after the 10 s grace were cut off\n"
                    "r2med: stopped serving\n")
