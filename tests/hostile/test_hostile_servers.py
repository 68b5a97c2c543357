"""Every LLM-calling command against every way a server can misbehave (``hostile_server.BEHAVIOURS``): no traceback,
no attempt past its deadline (checked with a wide margin), the README's exit codes, the key in no written file and
no output, and after the server recovers a rerun finishes without sending a finished request again."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_server import BEHAVIOURS, SURROGATE, HostileServer

from conftest import DATA

KEY = "sk-hostile-SECRET-4242"
#: the flags every command gets: a 1 s deadline per attempt, one retry, the key from a variable
COMMON = ["--timeout", "1", "--max-retries", "1", "--api-key-env", "HOSTILE_KEY", "--llm-model", "m"]
COMMANDS = {
    "expand": lambda url, data, out: ["expand", "--method", "hyde", "--max-tokens", "16", "--base-url", url,
                                      "--data-dir", data, "--out", out],
    "rerank": lambda url, data, out: ["run", "--retriever", "bm25", "--reranker", "listwise", "--rerank-top-k", "3",
                                      "--base-url", url, "--data-dir", data, "--output", out],
    "agent": lambda url, data, out: ["agent", "--style", "search-r1", "--chat-template", "chatml", "--max-turns", "2",
                                     "--base-url", url, "--data-dir", data, "--output", out],
}


@pytest.fixture(scope="module")
def server():
    with HostileServer(huge_bytes=2 * 2**20) as running:
        yield running


@pytest.fixture
def small_answers(monkeypatch):
    from r2med.http import client

    monkeypatch.setattr(client, "MAX_ANSWER_BYTES", 2**20, raising=False)  # the server's huge answer is 2 MiB


def _written(*roots: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for root in roots for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_hostile_server(cli, server, small_answers, isolated_home, tmp_path, monkeypatch, command, behaviour):
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    argv = [*COMMANDS[command](server.url(behaviour), str(data), str(tmp_path / "out")), *COMMON]
    server.recovered = False
    started = time.monotonic()
    result = cli(*argv)
    seconds = time.monotonic() - started
    assert "Traceback" not in result.err, result.err
    # two attempts of at most 1 s per request, three queries: far under 30 s even on a busy machine
    assert seconds < 30, f"{command} against {behaviour} ran {seconds:.0f} s"
    assert result.code == (0 if behaviour == "surrogate" else 6), (result.code, result.err)
    assert KEY not in result.out + result.err + _written(tmp_path, isolated_home)
    answered = dict(server.requests)
    server.recovered = True
    again = cli(*argv)
    assert again.code == 0, again.err
    if behaviour == "surrogate":  # every answer of the first run was kept: none is asked again
        # (the agent reads the server's context again, a GET of its description, not of work)
        work = {k: v for k, v in answered.items() if k[0] not in ("/v1/models", "/props")}
        assert {k: v for k, v in server.requests.items() if k in work} == work
    assert KEY not in again.out + again.err + _written(tmp_path, isolated_home)


def test_the_response_cache_keeps_a_lone_surrogate_losslessly(tmp_path):
    from r2med.llm.cache import ResponseCache

    path = tmp_path / "cache.jsonl"
    cache = ResponseCache(path)
    cache.append("k", {"text": "half \ud83d here", "n": 1})
    cache.close()
    assert b'"half \\ud83d here"' in path.read_bytes()  # its JSON escape: valid UTF-8 on disk
    assert ResponseCache(path).get("k") == {"text": "half \ud83d here", "n": 1}


#: what no retry would change: an answer past the size bound, a rejected key
ONE_ATTEMPT = ("endless", "huge", "echo-401")


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_the_embeddings_api_against_a_hostile_server(cli, server, small_answers, isolated_home, tmp_path, monkeypatch,
                                                     behaviour):
    """``--retriever openai:MODEL`` (POST /embeddings) under the same rules: its --timeout bounds an attempt, its
    --max-retries the attempts; the key in no file or output; a rerun after recovery asks nothing already answered."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url(behaviour))
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    argv = ["run", "--retriever", "openai:m", "--data-dir", str(data), "--output", str(tmp_path / "out"),
            "--timeout", "1", "--max-retries", "1"]
    server.recovered = False
    started = time.monotonic()
    result = cli(*argv)
    seconds = time.monotonic() - started
    assert "Traceback" not in result.err, result.err
    assert seconds < 30, f"embeddings against {behaviour} ran {seconds:.0f} s"  # two 1 s attempts a batch, and a wait
    assert result.code == (0 if behaviour == "surrogate" else 6), (result.code, result.err)
    if behaviour not in ("surrogate", *ONE_ATTEMPT):
        assert "/embeddings" in result.err and "2 attempts" in result.err, result.err  # --max-retries 1: two
    assert KEY not in result.out + result.err + _written(tmp_path, isolated_home)
    answered = {k: v for k, v in server.requests.items() if k[0].endswith("/embeddings")}
    server.recovered = True
    again = cli(*argv)
    assert again.code == 0, again.err
    if behaviour == "surrogate":  # every batch of the first run is in the embedding cache: none is asked again
        # (the agent reads the server's context again, a GET of its description, not of work)
        work = {k: v for k, v in answered.items() if k[0] not in ("/v1/models", "/props")}
        assert {k: v for k, v in server.requests.items() if k in work} == work
    assert KEY not in again.out + again.err + _written(tmp_path, isolated_home)


#: a download's outcome per behaviour: the bytes as sent (a download does not read them), or an error after how many
#: attempts (--max-retries 1: two; what no retry changes: one)
DOWNLOADS = {"slow": 2, "trickle": 2, "endless": 1, "huge": 1, "429": 2, "500": 2, "echo-401": 1,
             "empty": b"", "bad-utf8": b'\xff\xfe{"choices": \x80}', "bad-json": b'{"choices": [',
             "no-choices": b'{"choices": []}',
             "surrogate": json.dumps({"choices": [{"text": SURROGATE, "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode(),
             "echo-200": b'{"proxy": {"headers": {"Authorization": ""}}}'}  # a GET sends no key


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_a_download_from_a_hostile_server(server, behaviour):
    """``--first-stage URL``'s GET (``r2med.http.download``) on the shared stack: a 1 s deadline per attempt holds
    against a trickling or endless answer, retries as every request, the bytes returned exactly as sent."""
    import threading

    from r2med.errors import ProviderError
    from r2med.http.download import download
    from r2med.http.retry import RetryPolicy

    server.recovered = False
    url = f"{server.url(behaviour)}/runs/Biology.run"
    before = sum(1 for seen, _ in server.log if seen == behaviour)
    outcome: list = []

    def get() -> None:
        try:
            outcome.append(download(url, timeout=1, max_bytes=2**20,
                                    policy=RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.02)))
        except Exception as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    worker = threading.Thread(target=get, daemon=True)
    worker.start()
    worker.join(30)  # two attempts of 1 s: far under 30 s
    assert not worker.is_alive(), f"a download from a {behaviour} server still running after 30 s"
    sent = sum(1 for seen, _ in server.log if seen == behaviour) - before
    expected = DOWNLOADS[behaviour]
    if isinstance(expected, int):
        assert isinstance(outcome[0], ProviderError), outcome
        assert sent == expected
        assert str(outcome[0]).startswith(f"download: GET {url}"), outcome[0]
    else:
        assert sent == 1
        assert outcome[0] == expected


@pytest.mark.parametrize("behaviour", ["echo-200", "echo-401", "500"])
@pytest.mark.parametrize("command", [*COMMANDS, "embeddings"])
def test_a_key_in_the_url_is_in_no_file_and_no_output(cli, server, isolated_home, tmp_path, monkeypatch, command,
                                                      behaviour):
    """``--base-url http://user:KEY@host/v1``: the key as written, and the ``Basic`` token the client sends for it
    (which an echoing proxy quotes back), are cut out of every error, log line (-v) and written file."""
    import base64

    url = server.url(behaviour).replace("http://", f"http://user:{KEY}@")
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    if command == "embeddings":
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        argv = ["run", "--retriever", "openai:m", "--data-dir", str(data), "--output", str(tmp_path / "out"),
                "--timeout", "1", "--max-retries", "0"]
    else:
        argv = [*COMMANDS[command](url, str(data), str(tmp_path / "out")), "--timeout", "1", "--max-retries", "0",
                "--llm-model", "m"]
    server.recovered = False
    result = cli("-v", *argv)
    assert "Traceback" not in result.err, result.err
    assert result.code == 6, (result.code, result.err)
    shown = result.out + result.err + _written(tmp_path, isolated_home)
    token = base64.b64encode(f"user:{KEY}".encode()).decode()
    assert KEY not in shown and token not in shown, [line for line in shown.splitlines() if KEY in line or token in line]


def test_reproduce_has_a_deadline_for_its_first_stage_download(cli, server, isolated_home, tmp_path):
    """``r2med reproduce ROW --first-stage URL`` calls a server too: its --timeout bounds each attempt of the download
    and --max-retries the attempts (without them a trickling server held it 7 attempts of 60 s)."""
    data = tmp_path / "data"
    shutil.copytree(DATA / "tiny", data / "Biology")
    server.recovered = False
    before = sum(1 for seen, _ in server.log if seen == "trickle")
    started = time.monotonic()
    result = cli("reproduce", "reranker/reasonrank-32b/e5/top_100", "--first-stage",
                 server.url("trickle") + "/{dataset}.txt", "--tasks", "Biology", "--data-dir", data, "--output",
                 tmp_path / "out", "--timeout", "1", "--max-retries", "1")
    seconds = time.monotonic() - started
    assert "Traceback" not in result.err, result.err
    assert result.code == 6, (result.code, result.err)
    assert seconds < 30, f"reproduce's download ran {seconds:.0f} s"  # two attempts of 1 s
    assert sum(1 for seen, _ in server.log if seen == "trickle") - before == 2
    assert "timed out after 1 s" in result.err, result.err


def test_reproduce_hands_its_deadline_to_the_servers_of_the_row():
    from r2med.reproduction import plan_for
    from r2med.rerankers.registry import options_for

    spec = plan_for("reranker/reasonrank-32b/e5/top_100").spec(datasets=["Biology"], timeout=2.5, max_retries=0)
    options = options_for(spec.reranker.name, spec.reranker.options)
    assert (options.timeout, options.max_retries) == (2.5, 0)
