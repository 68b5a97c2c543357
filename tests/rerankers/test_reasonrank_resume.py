"""``r2med rerank --reranker reasonrank-7b`` killed midway (SIGKILL), rerun to the end: no finished request goes to the
server again, and the reranked run is byte for byte that of an uninterrupted run.

The CLI runs in a subprocess against the scripted server (``reasonrank_server.py``, in this process), which records
every request body: "nothing was requested twice" is checked on what went over the wire (the prompts), not on what
r2med says it did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reasonrank_server import ReasonRankServer
from rerank_helpers import BM25_TOP20
from test_reasonrank import byte_tokenizer, reverse_answer

from conftest import shared_path

pytest.importorskip("ftfy", reason="ftfy (the llm extra) is needed for ReasonRank's prompt")

CONCURRENCY = 2
WINDOWS = 12  # window 10, step 5 over the top 20: 3 windows for each of the 4 queries
KILL_AFTER = 4  # responses in the cache


def command(base_url: str, tokenizer: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "r2med.cli", "rerank", "--run", str(BM25_TOP20), "--system", "bm25", "--reranker",
            "reasonrank-7b", "--tokenizer", str(tokenizer), "--base-url", base_url, "--top-k", "20", "--window", "10",
            "--stride", "5", "--concurrency", str(CONCURRENCY), "--tasks", "scifact", "--data-dir",
            str(shared_path("data", "scifact")), "--output", str(output), "-q"]


def environment(home: Path) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


@pytest.mark.slow  # three runs of the CLI, ~15 s
def test_killed_reasonrank_resumes_without_repeating_a_request(tmp_path):
    tokenizer = tmp_path / "tokenizer"
    byte_tokenizer().save_pretrained(tokenizer)
    run_file = Path("reranker") / "reasonrank-7b" / "bm25" / "top_20" / "scifact.run"

    with ReasonRankServer(reverse_answer, latency=0.1) as server:  # the reference, uninterrupted
        done = subprocess.run(command(server.base_url, tokenizer, tmp_path / "ref"), env=environment(tmp_path / "h0"),
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        expected = [r.body["prompt"] for r in server.requests]
    assert len(expected) == len(set(expected)) == WINDOWS

    home, output = tmp_path / "home", tmp_path / "out"
    cache = home / "rerank" / "reasonrank" / "liuwenhan__reasonrank-7B.jsonl"
    with ReasonRankServer(reverse_answer, latency=0.3) as server:
        first = subprocess.Popen(command(server.base_url, tokenizer, output), env=environment(home),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and first.poll() is None:
                if cache.exists() and len(cache.read_text().splitlines()) >= KILL_AFTER:
                    first.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.005)
        finally:
            if first.poll() is None:
                first.kill()
            first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()
        time.sleep(0.6)  # the requests in flight at the kill are answered (to nobody) and recorded
        sent_before = [r.body["prompt"] for r in server.requests]
        finished = len([line for line in cache.read_text().splitlines() if line.strip()])
        assert KILL_AFTER <= finished < WINDOWS and not (output / run_file).exists()
        kept = {json.loads(line)["key"] for line in cache.read_text().splitlines() if line.strip()}

        second = subprocess.run(command(server.base_url, tokenizer, output), env=environment(home),
                                capture_output=True, text=True, timeout=300, check=False)
        assert second.returncode == 0, second.stderr
        sent_after = [r.body["prompt"] for r in server.requests[len(sent_before):]]

    # the wire: the rerun sent every window the first run did not finish, and none that it did; only the requests in
    # flight at the kill went twice
    assert len(sent_after) == WINDOWS - finished == len(set(sent_after))
    twice = set(sent_before) & set(sent_after)
    assert len(twice) <= CONCURRENCY and len(sent_before) - len(twice) == finished
    assert set(sent_before) | set(sent_after) == set(expected)
    assert len(kept) == finished
    assert (output / run_file).read_bytes() == (tmp_path / "ref" / run_file).read_bytes()
