"""Leaderboard row 2 from the command line: ``r2med reproduce 'reranker/reasonrank-32b/e5/top_100' --base-url URL``.

The real ReasonRank reranker (no stand-in) runs against a fake vLLM (``reasonrank_server``: ``/v1/models``,
``/tokenize``, ``/detokenize``, the completions, 404 for the rest) given by ``--base-url`` alone (no
``$OPENAI_BASE_URL``), over the published first stage pinned as ``--first-stage authors`` is: the authors' E5 runs,
served here over HTTP, checked against the digests r2med packages (here the test's). ReasonRank's prompt needs the
model's tokenizer, found as a user has it: in the local Hugging Face cache under ``liuwenhan/reasonrank-32B`` (here
a byte-level tokenizer with Qwen's chat template).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import re
import shutil
import threading

import pytest
from reasonrank_server import ReasonRankServer
from test_reasonrank import byte_tokenizer

from conftest import DATA
from r2med.datasets.catalog import dataset_names

ROW = "reranker/reasonrank-32b/e5/top_100"
#: the first stage of every dataset (tests/data/tiny: q1 judges d1, d4 relevant; q2 judges d2 2, d3 0)
RUN = ("q1 Q0 d2 1 4.0 e5-mistral-7b-instruct\nq1 Q0 d1 2 3.0 e5-mistral-7b-instruct\n"
       "q1 Q0 d3 3 2.0 e5-mistral-7b-instruct\nq1 Q0 d4 4 1.0 e5-mistral-7b-instruct\n"
       "q2 Q0 d3 1 2.0 e5-mistral-7b-instruct\nq2 Q0 d2 2 1.0 e5-mistral-7b-instruct\n")
#: what the scripted model ranks first: the documents judged relevant (their texts in tests/data/tiny)
RELEVANT = ("aspirin reduces fever and pain", "fever is a sign of infection", "insulin regulates blood glucose")
_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


def relevant_first(query: str, n: int, body: dict) -> str:
    """ReasonRank's answer: the passages whose text is judged relevant first, in the order of RELEVANT."""
    shown = {int(number): text for number, text in _PASSAGE.findall(body["prompt"])}
    key = {number: (RELEVANT.index(text) if text in RELEVANT else len(RELEVANT), number)
           for number, text in shown.items()}
    return "<think>ranked</think> <answer>" + " > ".join(f"[{i}]" for i in sorted(shown, key=key.get)) + "</answer>"


@pytest.fixture
def eight(tmp_path):
    root = tmp_path / "data"
    for name in dataset_names():
        shutil.copytree(DATA / "tiny", root / name)
    return root


@pytest.fixture
def authors_runs(tmp_path, monkeypatch):
    """The authors' layout served over HTTP, and r2med's record of it (URL and each file's sha256 and size)."""
    from r2med import first_stages

    root = tmp_path / "served"
    for name in dataset_names():
        (root / "runs" / f"r2med_{name}").mkdir(parents=True)
        (root / "runs" / f"r2med_{name}" / "e5_top100.txt").write_text(RUN)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/runs/r2med_{{dataset}}/e5_top100.txt"
    digest = {"sha256": hashlib.sha256(RUN.encode()).hexdigest(), "size": len(RUN)}
    record = {"description": "the test's E5 top-100 runs", "system": "e5", "paper_row": "base retriever/e5",
              "url": url, "files": dict.fromkeys(dataset_names(), digest)}
    monkeypatch.setattr(first_stages, "_first_stages", lambda: {"runs": {"authors-e5": record}})
    yield url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cached_tokenizer(tmp_path, monkeypatch):
    """liuwenhan/reasonrank-32B's tokenizer in a Hugging Face cache (the hub layout: refs/main -> snapshots/<commit>)."""
    import huggingface_hub.constants

    cache = tmp_path / "hf-cache"
    repo = cache / "models--liuwenhan--reasonrank-32B"
    commit = "0" * 40
    byte_tokenizer().save_pretrained(repo / "snapshots" / commit)
    (repo / "snapshots" / commit / "config.json").write_text('{"model_type": "qwen2"}')  # as Qwen2.5-32B's
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_row_2_runs_on_the_base_url_over_the_pinned_authors_runs(cli, tmp_path, eight, authors_runs, cached_tokenizer,
                                                                  isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ReasonRankServer(relevant_first) as server:
        argv = ["reproduce", ROW, "--first-stage", "authors", "--data-dir", eight, "--output", tmp_path / "out",
                "--base-url", server.base_url, "--max-retries", "0", "-q"]
        shown = cli(*argv, "--dry-run")
        assert shown.code == 0, shown.err
        assert f"  LLM server: {server.base_url} (--base-url)" in shown.out.splitlines()
        assert server.requests == [] and server.other == []  # the dry run contacted nothing
        done = cli(*argv)
    assert done.code == 1, done.err  # reranked perfectly on the tiny data: 100.00 is not the leaderboard's 42.85
    # every window went to the --base-url server, as the authors sent it: the prompt to /v1/completions, the model's id
    # 2 queries, one window each (4 and 2 passages); the 7 other datasets (the same tiny data) show the same windows,
    # answered from the response cache
    assert len(server.requests) == 2
    assert {(r.path, r.body["model"]) for r in server.requests} == {("/v1/completions", "liuwenhan/reasonrank-32B")}
    assert server.other == []
    lines = done.out.splitlines()
    assert lines[0] == ("first stage: the test's E5 top-100 runs, evaluated before reranking, beside the paper's "
                        "base retriever/e5 (x100)")
    assert "| Biology          | 100.00 |     - |    - | not compared |" in lines
    assert lines[-2] == ("The leaderboard publishes only this row's average (E5-mistral-7b-instruct + ReasonRank(32B): "
                         "42.85, over the 8 datasets); no per-dataset numbers, so the average is compared, to 0.01: "
                         "ours 100.00, leaderboard 42.85, diff +57.15: DIFFERENT")
    stored = tmp_path / "out" / "reranker" / "reasonrank-32b" / "e5" / "top_100" / "Biology.run"
    assert stored.read_text().split("\n")[:2] == ["q1 Q0 d1 1 4.0 e5", "q1 Q0 d4 2 3.0 e5"]


def test_the_dry_run_says_which_server_and_refuses_an_endpoint_no_stage_takes(cli, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    none = cli("reproduce", ROW, "--dry-run")
    assert none.code == 0 and "  LLM server: none given: pass --base-url URL" in none.out.splitlines()
    given = cli("reproduce", ROW, "--dry-run", "--base-url", "http://gpu-box:8000/v1").out.splitlines()
    # the command that runs the plan, as every dry run prints it (issue 37: reproduce's listed needs, not the command)
    assert given[-2:] == ["    - Hugging Face hub access (liuwenhan/reasonrank-32B's tokenizer (or --tokenizer DIR))",
                          f"  command: r2med reproduce {ROW} --base-url http://gpu-box:8000/v1"]
    assert "  LLM server: http://gpu-box:8000/v1 (--base-url)" in given
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:secret@gpu:8000/v1")
    from_env = cli("reproduce", ROW, "--dry-run", "--json")
    assert from_env.code == 0 and from_env.json()["llm_server"] == "http://gpu:8000/v1 ($OPENAI_BASE_URL)"
    assert cli("reproduce", "base retriever/bm25", "--dry-run", "--json").json()["llm_server"] is None
    refused = cli("reproduce", "base retriever/bm25", "--dry-run", "--base-url", "http://x:8000/v1")
    assert refused.code == 2
    assert "--base-url: base retriever/bm25 calls no server that takes it (its retriever bm25); drop it" in refused.err
