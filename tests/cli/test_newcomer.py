"""Issue 25's findings on the step after the quick start: each command a newcomer types next gets one clear line."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def sample(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("datasets", "sample", "data").code == 0
    return tmp_path


def closed_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_llm_server_fails_at_once_in_one_line(cli, sample):
    port = closed_port()
    result = cli("expand", "--method", "hyde", "--llm-model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
                 "--data-dir", "data", "--prompt-dataset", "Biology", "--max-retries", "6", "-q")
    assert result.code == 4
    # one attempt (no "on N attempts"), the URL and what to do, on one line
    assert result.err == (f"r2med: error: m: cannot reach http://127.0.0.1:{port}/v1/chat/completions: connection "
                          "refused (is the server started?); start the server first (e.g. `vllm serve MODEL --port "
                          "8000` or `llama-server -m MODEL.gguf --port 8080`) and pass its address as --base-url "
                          "http://HOST:PORT/v1 (or $OPENAI_BASE_URL)\n")


def test_fuse_refuses_an_output_ending_in_a_slash(cli, sample):
    assert cli("run", "--data-dir", "data", "-q").code == 0
    result = cli("fuse", "results/base retriever/bm25", "results/base retriever/bm25", "-o", "outdir/")
    assert result.code == 2 and "'outdir/' names a directory (it ends with '/')" in result.err
    assert "e.g. outdir/fused.run" in result.err and not (sample / "outdir").exists()


def test_rerank_hint_does_not_repeat_a_typo_and_keeps_data_dir_and_output(cli, sample):
    assert cli("run", "--data-dir", "data", "--output", "res", "-q").code == 0
    result = cli("rerank", "--run", "bm99", "--reranker", "listwise", "--llm-model", "m", "--base-url",
                 "http://127.0.0.1:9/v1", "--data-dir", "data", "--output", "res")
    assert result.code == 4, result.err
    assert result.err.endswith("; stored first stages there: bm25; did you mean 'bm25'? make one with: r2med run "
                               "--retriever NAME --data-dir data --output res --tasks scifact-sample\n")
    assert "--retriever bm99" not in result.err
    # a known retriever that was not run yet is named as given
    result = cli("rerank", "--run", "bm25-lucene", "--reranker", "listwise", "--llm-model", "m", "--base-url",
                 "http://127.0.0.1:9/v1", "--data-dir", "data", "--output", "res")
    assert result.code == 4 and "make one with: r2med run --retriever bm25-lucene --data-dir data --output res" in result.err


def test_a_short_system_name_needs_no_quoting(cli, sample):
    assert cli("run", "--data-dir", "data", "-q").code == 0
    assert cli("run", "--data-dir", "data", "--bm25-variant", "lucene", "-q").code == 0
    result = cli("compare", "bm25", "bm25-lucene", "--n-resamples", "10", "--json")
    assert result.code == 0, result.err
    assert (result.json()["a"], result.json()["b"]) == ("base retriever/bm25", "base retriever/bm25-lucene")
    # a short name that fits two systems is refused, naming both
    fused = sample / "results" / "fusion" / "bm25"
    fused.mkdir(parents=True)
    for path in (sample / "results" / "base retriever" / "bm25").iterdir():
        (fused / path.name).write_bytes(path.read_bytes())
    result = cli("compare", "bm25", "bm25-lucene", "--n-resamples", "10")
    assert result.code == 2
    assert result.err == "r2med: error: 'bm25' fits 2 systems: 'base retriever/bm25', 'fusion/bm25'; name one of them\n"
    assert cli("compare", "fusion/bm25", "bm25-lucene", "--n-resamples", "10").code == 0
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    result = cli("report", "--a", "fusion/bm25", "--b", "bm25-lucene", "--n-resamples", "10", "--json")
    assert result.code == 0, result.err
    assert cli("report", "--a", "bm25", "--n-resamples", "10").code == 2
