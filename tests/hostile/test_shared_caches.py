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


@pytest.mark.parametrize(("edit", "said"), [
    (lambda record: record.pop("text"), "no 'text' string"),
    (lambda record: record.update(text=5), "no 'text' string"),
    (lambda record: record.update(reasoning_content=["x"]), "'reasoning_content' that is neither text nor null"),
])
def test_an_edited_answer_in_the_expansion_cache_is_refused_not_a_traceback(cli, server, isolated_home, tmp_path,
                                                                            edit, said):
    """``generations.jsonl`` is edited by hand (its docs say: delete a line to regenerate it): a line that is JSON
    with its key but not the shape r2med wrote is exit 5 naming the file, the query and the fix."""
    import json

    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    argv = ["expand", "--method", "hyde", "--max-tokens", "16", "--data-dir", data, "--out", tmp_path / "out",
            "--llm-model", "m", "--base-url", server.url("ok"), "--timeout", "5"]
    assert cli(*argv).code == 0
    generations = tmp_path / "out" / "generations.jsonl"
    lines = generations.read_text().splitlines()
    record = json.loads(lines[0])
    edit(record)
    generations.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    for made in (tmp_path / "out").iterdir():  # the expansion made from it: made again from the cache
        if made != generations:
            shutil.rmtree(made) if made.is_dir() else made.unlink()
    result = cli(*argv)
    assert "Traceback" not in result.err, result.err
    assert result.code == 5, (result.code, result.err)
    assert str(generations) in result.err and f"query {record['qid']!r}" in result.err and said in result.err


@pytest.mark.parametrize(("edit", "said"), [
    (lambda record: record.pop("text"), "no 'text' string"),
    (lambda record: record.update(text=5), "no 'text' string"),
    (lambda record: record.update(text=["[1] > [2]"]), "no 'text' string"),
    (lambda record: record.update(prompt_tokens="many"), "'prompt_tokens' that is not a whole number"),
])
def test_an_edited_answer_in_the_listwise_cache_is_refused(cli, isolated_home, tmp_path, edit, said):
    """A line of the listwise cache edited out of the shape r2med wrote: exit 5 naming the file, the query and the
    fix, not a traceback (a non-text 'text') nor a window silently kept in its order (no 'text' at all)."""
    import json

    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    with HostileServer(content="[2] > [1] > [3]") as ranking:
        argv = ["run", "--retriever", "bm25", "--reranker", "listwise", "--rerank-top-k", "3", "--llm-model", "m",
                "--base-url", ranking.url("ok"), "--data-dir", data, "--output", tmp_path / "out", "--timeout", "5"]
        assert cli(*argv).code == 0
        cache_file = isolated_home / "rerank" / "listwise" / "m.jsonl"
        lines = cache_file.read_text().splitlines()
        record = json.loads(lines[0])
        edit(record)
        cache_file.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
        result = cli(*argv, "--force")
    assert "Traceback" not in result.err, result.err
    assert result.code == 5, (result.code, result.err)
    assert str(cache_file) in result.err and f"query {record['qid']!r}" in result.err and said in result.err


@pytest.mark.parametrize(("edit", "said"), [
    (lambda record: record.pop("text"), "no 'text' string"),
    (lambda record: record.update(text=5), "no 'text' string"),
])
def test_an_edited_answer_in_the_agent_cache_is_refused(cli, server, isolated_home, tmp_path, edit, said):
    """A line of agent-cache.jsonl edited out of the shape r2med wrote: exit 5 naming the file and the fix (it was a
    query failed with 'KeyError: text', exit 6, and the same on every rerun)."""
    import json

    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    argv = ["agent", "--style", "search-r1", "--chat-template", "chatml", "--max-turns", "2", "--llm-model", "m",
            "--base-url", server.url("ok"), "--data-dir", data, "--output", tmp_path / "out", "--timeout", "5"]
    assert cli(*argv).code == 0
    cache_file = next(isolated_home.rglob("agent-cache.jsonl"))
    lines = cache_file.read_text().splitlines()
    record = json.loads(lines[0])
    edit(record)
    cache_file.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    result = cli(*argv, "--force")
    assert "Traceback" not in result.err, result.err
    assert result.code == 5, (result.code, result.err)
    assert str(cache_file) in result.err and said in result.err and "delete that line" in result.err
