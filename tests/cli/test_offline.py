"""No network and HF_HUB_OFFLINE unset: every command that may touch the hub stops at its first connection attempt
with one line saying what to do, exit 4, never a traceback and never huggingface_hub's retry loop.

The socket layer of the process is blocked (every connection attempt is counted and fails with ENETUNREACH), with
r2med's real probe of the hub put back (conftest stubs it for the other tests); one test runs fresh processes against
a closed loopback port as HF_ENDPOINT, where nothing is patched at all.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys

import pytest

import r2med.hf
from conftest import DATA, REPO

#: The real probe, kept before conftest's autouse fixture replaces it for every test.
REAL_CONNECT_ONCE = r2med.hf.connect_once
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def _r2med_process(args, *, env, cwd, timeout) -> subprocess.CompletedProcess:
    """``python -m r2med.cli ARGS`` in a fresh process with ``env``."""
    return subprocess.run([sys.executable, "-m", "r2med.cli", *map(str, args)], check=False, capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout)


@pytest.fixture
def no_network(monkeypatch):
    """HF_HUB_OFFLINE unset, huggingface_hub's own offline switch off, and every connection attempt refused
    (ENETUNREACH) and recorded: returns the list of ``(host, port)`` attempted."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read when huggingface_hub was imported
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(r2med.hf, "connect_once", REAL_CONNECT_ONCE)
    attempts: list[tuple[object, object]] = []

    def unreachable(host, port):
        attempts.append((host, port))
        raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))

    def create_connection(address, *args, **kwargs):
        unreachable(*address[:2])

    def connect(self, address):
        unreachable(*address[:2])

    def getaddrinfo(host, port, *args, **kwargs):
        unreachable(host, port)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return attempts


@pytest.fixture
def biology(tmp_path):
    """tests/data/tiny as a local dataset named Biology (an R2MED name: its expansions live on the hub)."""
    folder = tmp_path / "data" / "Biology"
    shutil.copytree(DATA / "tiny", folder)
    return folder


def assert_one_line_exit_4(result, attempts, what):
    assert result.code == 4, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("r2med: error:")]
    assert len(errors) == 1, result.err
    assert (
        "cannot reach the Hugging Face hub (https://huggingface.co: OSError: [Errno 101] Network is unreachable)"
    ) in errors[0]
    assert f" to {what}" in errors[0] and ": connect a network, or " in errors[0]
    assert "Traceback" not in result.err and "Retrying" not in result.err
    assert attempts == [("huggingface.co", 443)]  # the probe, once: no request, no retry


HUB_DATASET_COMMANDS = {
    "datasets download": (["datasets", "download", "Biology"], "download Biology"),
    "datasets download all": (["datasets", "download", "all"], "download Biology"),
    "datasets expansions": (["datasets", "expansions", "Biology"], "list the files of R2MED/Biology"),
    "datasets stats": (["datasets", "stats", "Biology"], "download Biology"),
    "datasets validate": (["datasets", "validate", "Biology"], "download Biology"),
    "run": (["run", "--tasks", "all", "--output", "{out}"], "download Biology"),
    "reproduce": (
        ["reproduce", "base retriever/bm25", "--tasks", "PMC-Treat", "--output", "{out}"],
        "download PMC-Treatment",
    ),
    "expand": (
        [
            "expand",
            "-q",
            "--method",
            "hyde",
            "--llm-model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--tasks",
            "Biology",
        ],
        "download Biology",
    ),
    "agent": (
        [
            "agent",
            "--style",
            "search-r1",
            "--llm-model",
            "m",
            "--chat-template",
            "raw",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--tasks",
            "Biology",
            "--output",
            "{out}",
        ],
        "download Biology",
    ),
    "serve": (["serve", "--task", "Biology"], "download Biology"),
}


@pytest.mark.parametrize("command", HUB_DATASET_COMMANDS)
def test_hub_datasets_unreachable_one_line_exit_4(cli, no_network, tmp_path, isolated_home, command):
    args, what = HUB_DATASET_COMMANDS[command]
    result = cli(*[a.format(out=tmp_path / "results") for a in args])
    assert_one_line_exit_4(result, no_network, what)
    assert result.err.count("\n") == 1  # nothing else on stderr
    assert list(isolated_home.rglob("*.jsonl")) == []  # no half download left behind


def test_datasets_messages_say_how_to_go_on_offline(cli, no_network):
    download = cli("datasets", "download", "Biology")
    assert (
        "or set HF_HUB_OFFLINE=1 and use the datasets already downloaded ('r2med datasets list' shows them) "
        "or --data-dir DIR" in download.err
    )
    listing = cli("datasets", "expansions", "Biology")
    assert "or pass --local to list only the expansion files on this machine" in listing.err
    no_network.clear()
    local = cli("datasets", "expansions", "Biology", "--local")  # what the message says works, with no connection
    assert local.code == 0 and local.out.strip() == "no expansions found" and no_network == []


def test_published_expansion_not_on_this_machine(cli, no_network, biology, tmp_path, isolated_home):
    result = cli("run", "--data-dir", biology.parent, "--expansion", "hyde/o3-mini", "--output", tmp_path / "out")
    assert_one_line_exit_4(result, no_network, "download R2MED/Biology/hyde/o3-mini/query_with_hydoc.jsonl")
    line = result.err.splitlines()[-1]
    assert line.startswith("r2med: error: no hyde/o3-mini expansions for Biology on this machine, and cannot reach")
    assert line.endswith(
        "connect a network, or generate them ('r2med expand --method hyde --llm-name o3-mini ...'), "
        f"or put the file at {isolated_home / 'expansions/Biology/hyde/o3-mini/query_with_hydoc.jsonl'} "
        "(R2MED_HUB_PROBE=0 skips this check)"
    )


def test_a_local_run_needs_no_connection(cli, no_network, biology, tmp_path):
    result = cli("run", "--data-dir", biology.parent, "--output", tmp_path / "out")
    assert result.code == 0, result.err
    assert no_network == []


MODEL_COMMANDS = {
    "hub id outside the zoo": (
        ["run", "--retriever", "someone/no-such-model"],
        "look up model 'someone/no-such-model'",
    ),
    "zoo dense model": (["run", "--retriever", "contriever"], "download model 'facebook/contriever-msmarco'"),
    "run --reranker": (
        ["run", "--reranker", "cross-encoder/ms-marco-MiniLM-L-6-v2"],
        "download model 'cross-encoder/ms-marco-MiniLM-L-6-v2'",
    ),
    "rerank cross-encoder": (
        ["rerank", "--run", "bm25", "--reranker", "cross-encoder/ms-marco-MiniLM-L-6-v2"],
        "download model 'cross-encoder/ms-marco-MiniLM-L-6-v2'",
    ),
    "rerank rankllama": (
        ["rerank", "--run", "bm25", "--reranker", "rankllama"],
        "download model 'castorini/rankllama-v1-7b-lora-passage'",
    ),
}


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_models_from_the_hub_unreachable_one_line_exit_4(cli, no_network, biology, tmp_path, command):
    pytest.importorskip("torch")  # the dense / rerank extras
    out = tmp_path / "out"
    first = cli("run", "--data-dir", biology.parent, "--output", out, "-q")  # the BM25 first stage: no hub
    assert first.code == 0, first.err
    args, what = MODEL_COMMANDS[command]
    result = cli(*args, "--data-dir", biology.parent, "--output", out)
    assert_one_line_exit_4(result, no_network, what)
    assert "(not in the local Hugging Face cache)" in result.err or "neither in the zoo" in result.err
    model = what.split("'")[1]
    assert f"('hf download {model}')" in result.err


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "args",
    [
        ["datasets", "download", "Biology"],
        ["datasets", "expansions", "Biology"],
        ["run", "--retriever", "someone/no-such-model", "--data-dir", "{data}"],
    ],
)
def test_a_fresh_process_against_a_closed_endpoint(tmp_path, biology, args):
    """Nothing patched: huggingface_hub reads HF_ENDPOINT at import, r2med probes that port, once."""
    port = _closed_port()
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES and k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", R2MED_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO / "src"))
    done = _r2med_process([a.format(data=biology.parent) for a in args], env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"r2med: error: cannot reach the Hugging Face hub (http://127.0.0.1:{port}: "
        "ConnectionRefusedError: [Errno 111] Connection refused) to "
    )


def test_docs_offline_page_shows_real_output(cli, no_network, monkeypatch, tmp_path, isolated_home):
    """docs/offline.md's session, run as written (HTTPS_PROXY a proxy that refuses every connection, as the page
    sets it), prints what it shows, in this process: the probe's one connection goes to the proxy and is refused."""
    import re
    import shlex

    pytest.importorskip("torch")  # the dense and rerank commands in it
    from conftest import REPO

    def refused(address, *args, **kwargs):
        no_network.append(tuple(address[:2]))
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    assert cli("datasets", "sample", "r2med-sample", "-q").code == 0
    shutil.copytree(tmp_path / "r2med-sample" / "scifact-sample", tmp_path / "data" / "Biology")
    page = (REPO / "docs" / "offline.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```text\n(.*?)```", page, flags=re.DOTALL)
    sessions = re.findall(r"^\$ r2med (.*?)\n(.*?)\$ echo \$\?.*?\n(\d+)\n", block, flags=re.DOTALL | re.MULTILINE)
    assert len(sessions) == 6
    for command, shown, code in sessions:
        result = cli(*shlex.split(command, comments=True))
        assert result.code == int(code), (command, result.err)
        printed = result.err if result.code else result.out
        assert printed == shown.replace("~/.cache/r2med", str(isolated_home)), command


def test_a_model_in_the_hf_cache_still_runs_without_network(tmp_path, biology):
    """A hub id already in the Hugging Face cache loads from it, without a request (and so without retries), when
    the hub cannot be reached: a fresh process, HF_HUB_OFFLINE unset, HF_ENDPOINT a closed port."""
    pytest.importorskip("transformers")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "models--org--tiny-bert"
    shutil.copytree(DATA / "dense" / "tiny-bert", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES and k != "HF_HUB_OFFLINE"}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
        HF_HUB_CACHE=str(tmp_path / "hf"),
        R2MED_HOME=str(tmp_path / "home"),
        PYTHONPATH=str(REPO / "src"),
    )
    command = ["run", "--retriever", "org/tiny-bert", "--data-dir", biology.parent, "--output", tmp_path / "out", "-q"]
    done = _r2med_process(command, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| Biology |" in done.stdout
    assert "Retrying" not in done.stderr and "127.0.0.1" not in done.stderr


def test_the_hub_check_can_be_turned_off(no_network, monkeypatch):
    """R2MED_HUB_PROBE=0: no probe; the request itself goes out (and here fails as huggingface_hub reports it)."""
    monkeypatch.setattr(r2med.hf, "connect_once", REAL_CONNECT_ONCE)
    monkeypatch.setenv("R2MED_HUB_PROBE", "0")
    assert r2med.hf.hub_unreachable() is None and no_network == []
    monkeypatch.setenv("R2MED_HUB_PROBE", "1")
    assert r2med.hf.hub_unreachable() is not None and len(no_network) == 1
