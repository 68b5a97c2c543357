"""``r2med agent`` killed midway (SIGKILL), rerun to the end: no finished request goes to the server again, and
the files it writes are byte for byte those of an uninterrupted run.

The CLI runs in a subprocess against the scripted completion server (``completion_server.py``, in this process),
which records every request body it receives: the key of each is recomputed from that body (model, prompt,
stop strings, sampling with the extra fields ``top_k``/``repetition_penalty``), so "nothing was requested
twice" is checked on what went over the wire, not on what r2med says it did.
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
from completion_server import CompletionServer

from llm_helpers import write_scifact_subset
from r2med.llm import SamplingParams, request_key

N_QUERIES = 12
OTHER_DOCS = 300  # besides the judged ones: enough for BM25 to have a choice, small enough to index at once
CONCURRENCY = 4
LATENCY = 0.1  # per request: a run takes a few seconds, so it can be killed midway
LLM = "fake-llm"
#: (style, LLM calls per query with the script's two searches, cache lines to wait for before the kill)
STYLES = {"search-r1": (3, 10), "search-o1": (5, 16)}
#: the counts above are those of infer.py's protocol for Search-R1
PROTOCOLS = {"search-r1": "search-r1-infer", "search-o1": "search-o1"}
#: every field a completion request may carry (anything else would be a field the cache key does not cover)
BODY_FIELDS = {"model", "prompt", "temperature", "top_p", "max_tokens", "seed", "stop", "top_k", "repetition_penalty"}


def wire_key(body: dict) -> str:
    """The cache key of a request, recomputed from the body the server received."""
    assert set(body) <= BODY_FIELDS, set(body) - BODY_FIELDS
    params = SamplingParams(body.get("temperature"), body.get("top_p"), body.get("max_tokens"), body.get("seed"))
    extra = {"stop": list(body.get("stop") or []), **{k: body[k] for k in ("top_k", "repetition_penalty") if k in body}}
    return request_key(body["model"], [{"role": "completion", "content": body["prompt"]}], params, extra=extra)


@pytest.fixture
def scifact_subset(tmp_path) -> tuple[Path, list[str]]:
    return write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=OTHER_DOCS)


def agent_command(style: str, base_url: str, data: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "r2med.cli", "agent", "--protocol", PROTOCOLS[style], "--llm-model", LLM, "--base-url", base_url,
            "--chat-template", "chatml", "--data-dir", str(data), "--output", str(output),
            "--concurrency", str(CONCURRENCY), "--seed", "7", "-q"]


def environment(home: Path) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def outputs(home: Path, output: Path, style: str) -> dict[str, bytes]:
    expansions = home / "expansions" / "scifact" / style / LLM
    return {
        "query_with_hydoc.jsonl": (expansions / "query_with_hydoc.jsonl").read_bytes(),
        "trajectories.jsonl": (expansions / "trajectories.jsonl").read_bytes(),
        "run": (output / "agent" / style / LLM / "bm25" / "scifact.run").read_bytes(),
    }


def cache_keys(path: Path) -> list[str]:
    return [json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow  # ~15 s a style: three runs of the CLI
@pytest.mark.parametrize("style", list(STYLES))
def test_killed_agent_resumes_without_repeating_a_request(style, scifact_subset, tmp_path):
    data, qids = scifact_subset
    assert len(qids) == N_QUERIES
    per_query, kill_after = STYLES[style]
    total = N_QUERIES * per_query

    # the reference: one uninterrupted run, its own server, home and output
    with CompletionServer(latency=LATENCY) as server:
        done = subprocess.run(agent_command(style, server.base_url, data, tmp_path / "ref-out"),
                              env=environment(tmp_path / "ref-home"), capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr
        expected = [wire_key(body) for body in server.requests]
    # each request sent once (two queries asking the same at once share one response)
    assert len(set(expected)) == len(expected) and total - N_QUERIES < len(expected) <= total
    reference = outputs(tmp_path / "ref-home", tmp_path / "ref-out", style)

    home, output = tmp_path / "home", tmp_path / "out"
    cache = home / "expansions" / "scifact" / style / LLM / "agent-cache.jsonl"
    command, env = agent_command(style, "", data, output), environment(home)
    with CompletionServer(latency=LATENCY) as server:
        command[command.index("--base-url") + 1] = server.base_url
        # run 1: killed (SIGKILL: no chance to clean up) once kill_after responses are in the cache
        first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and first.poll() is None:
                if cache.exists() and len(cache.read_text().splitlines()) >= kill_after:
                    first.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.005)
        finally:
            if first.poll() is None:
                first.kill()
            first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()
        sent_before = [wire_key(body) for body in server.requests]
        finished = cache_keys(cache)
        assert kill_after <= len(finished) < len(expected)  # killed midway
        assert not (cache.parent / "query_with_hydoc.jsonl").exists()  # the official files only come at the end
        # the killed run held the folder's lock: its file stays behind (a name only), and blocks no rerun below
        assert (cache.parent / ".r2med.lock").read_text().strip() == str(first.pid)
        assert not (cache.parent / "trajectories.jsonl").exists()

        # run 2: the same command, to the end
        second = subprocess.run(command[:-1] + ["--json"], env=env, capture_output=True, text=True, timeout=300,
                                check=False)
        assert second.returncode == 0, second.stderr
        sent_after = [wire_key(body) for body in server.requests[len(sent_before):]]

    # (a) the wire: each run sent each request once; the resumed run sent none that the first one finished;
    # the only requests the server got twice are the ones in flight when the first run was killed
    assert len(set(sent_before)) == len(sent_before) and len(set(sent_after)) == len(sent_after)
    assert set(finished) <= set(sent_before)
    assert set(sent_after).isdisjoint(finished)
    in_flight = set(sent_before) - set(finished)
    assert set(sent_before) & set(sent_after) == in_flight and len(in_flight) <= CONCURRENCY
    assert set(sent_before) | set(sent_after) == set(cache_keys(cache)) == set(expected)  # the reference's requests
    agent = json.loads(second.stdout)["agent"]["scifact"]
    assert agent["llm_calls"] == len(sent_after) and agent["llm_calls"] + agent["cached_calls"] == total

    # (b) the files: byte for byte those of the uninterrupted run
    resumed = outputs(home, output, style)
    for name, content in reference.items():
        assert resumed[name] == content, name
    rows = [json.loads(line) for line in resumed["query_with_hydoc.jsonl"].decode().splitlines()]
    assert [r["id"] for r in rows] == qids and all(r["stop_reason"] == "answer" and not r["fell_back"] for r in rows)


@pytest.mark.parametrize("style", list(STYLES))
def test_the_same_request_from_two_queries_at_once_is_sent_once(style, scifact_subset, tmp_path):
    """Two queries that make the same request at the same time (here: the same question) share one response: the
    server gets it once, and both trajectories are built from the response the cache keeps."""
    from dataclasses import replace

    from r2med.agent.loop import AgentConfig, run_agent
    from r2med.agent.search import open_searcher
    from r2med.datasets import load_dir
    from r2med.retrievers.bm25.retriever import BM25Retriever

    data, qids = scifact_subset
    dataset = load_dir(data, "scifact")
    question = dataset.queries[qids[0]]
    twins = replace(dataset, queries={qids[0]: question, qids[1]: question})
    searcher = open_searcher(BM25Retriever(cache_dir=None, progress=False, workers=1), dataset)
    with CompletionServer(latency=LATENCY) as server:
        config = AgentConfig(style=style, protocol=PROTOCOLS[style], llm_model=LLM, base_url=server.base_url, chat_template="chatml", concurrency=2)
        report = run_agent(twins, config, searcher, out_dir=tmp_path / "twins", progress=False)
        keys = [wire_key(body) for body in server.requests]
    per_query = STYLES[style][0]
    assert len(keys) == len(set(keys)) == per_query  # not 2 * per_query
    assert (report.llm_calls, report.cached_calls) == (per_query, per_query)
    first, second = report.trajectories
    assert first["id"] != second["id"]
    assert {k: v for k, v in first.items() if k != "id"} == {k: v for k, v in second.items() if k != "id"}
