"""The reranker caches under R2MED_HOME (``rerank/listwise``, ``rerank/completions``, ``rerank/reasonrank``) are
shared by every run with the same LLM, whatever its ``--output``: two writers at once must not overwrite each
other's paid answers, and a writer killed with SIGKILL must leave nothing that blocks the next run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_server import HostileServer

from conftest import DATA


@pytest.fixture(scope="module")
def server():
    with HostileServer() as running:
        yield running


def _listwise(cli, url: str, data: Path, out: Path):
    return cli("run", "--retriever", "bm25", "--reranker", "listwise", "--rerank-top-k", "3", "--llm-model", "m",
               "--base-url", url, "--data-dir", data, "--output", out, "--timeout", "5", "--max-retries", "0")


def test_a_second_writer_of_a_reranker_cache_is_refused_before_any_request(cli, server, isolated_home, tmp_path):
    from r2med.llm.cache import ResponseCache

    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    cache_file = isolated_home / "rerank" / "listwise" / "m.jsonl"
    first = ResponseCache(cache_file)  # another run with the same LLM, writing its answers
    first.append("paid-1", {"text": "an answer the first run paid for"})
    sent = sum(server.requests.values())
    result = _listwise(cli, server.url("ok"), data, tmp_path / "out2")
    assert result.code == 6, (result.code, result.err)
    assert str(cache_file) in result.err and "another r2med process" in result.err, result.err
    assert sum(server.requests.values()) == sent  # refused before its first request
    first.append("paid-2", {"text": "the first run's next answer"})
    first.close()
    assert ResponseCache(cache_file).keys() == ["paid-1", "paid-2"]  # nothing of the first run overwritten
    again = _listwise(cli, server.url("ok"), data, tmp_path / "out2")  # the first has finished: the second runs
    assert again.code == 0, again.err


def test_a_cache_writer_killed_with_sigkill_blocks_no_later_run(cli, server, isolated_home, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    cache_file = isolated_home / "rerank" / "listwise" / "m.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from r2med.llm.cache import ResponseCache
            cache = ResponseCache({str(cache_file)!r})
            cache.append("paid-1", {{"text": "kept"}})
            print("held", flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = _listwise(cli, server.url("ok"), data, tmp_path / "out")
        assert busy.code == 6, (busy.code, busy.err)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    result = _listwise(cli, server.url("ok"), data, tmp_path / "out")
    assert result.code == 0, result.err
    assert '"key": "paid-1"' in cache_file.read_text()  # the killed writer's answer is still there
