"""Rank1 and Qwen3-Reranker end to end against a real server: llama.cpp (``xllamacpp``) serving Gemma-3 270M on
loopback, on a small SciFact sample (top 4, 16-token traces). The numbers are poor (Gemma is neither model); the
point is the machinery: logprobs read from a real server, the forced answer, the caches, and a run killed with
SIGKILL whose rerun sends no finished request again (checked on what went over the wire, through a proxy)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from completions_server import CountingProxy

from llm_helpers import gemma_server, write_scifact_subset
from r2med.options import Runtime
from r2med.rerankers.registry import make_reranker
from r2med.types import Run

pytestmark = pytest.mark.slow

N_QUERIES, TOP_K = 3, 4

RUNNER = """
import argparse, sys
from r2med.cli.rerank import register
from r2med.errors import R2MedError
common = argparse.ArgumentParser(add_help=False)
common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
parser = argparse.ArgumentParser(prog="r2med", parents=[common])
register(parser.add_subparsers(dest="command"), common)
args = parser.parse_args(["rerank", *sys.argv[1:]])
args.quiet = getattr(args, "quiet", False)
try:
    sys.exit(args.func(args))
except R2MedError as exc:
    print(f"r2med: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    yield from gemma_server(tmp_path_factory, n_ctx=4096, n_parallel=2)


@pytest.fixture
def sample(tmp_path):
    """N_QUERIES SciFact queries, their judged documents and others (cut to 300 characters), and a first stage:
    each query's judged documents first, then others."""
    data, qids = write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=TOP_K, doc_chars=300)
    rows = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines()]
    qrels = [json.loads(line) for line in (data / "qrels.jsonl").read_text().splitlines()]
    others = [str(r["id"]) for r in rows[-TOP_K:]]
    run = Run()
    for qid in qids:
        judged = [str(r["p_id"]) for r in qrels if str(r["q_id"]) == qid]
        docs = list(dict.fromkeys(judged + others))[:TOP_K]
        run[qid] = {doc: float(TOP_K - i) for i, doc in enumerate(docs)}
    from r2med.store.runs import write_trec_run

    path = write_trec_run(run, tmp_path / "first.run")
    queries = {str(json.loads(line)["id"]): json.loads(line)["text"] for line in (data / "query.jsonl").read_text().splitlines()}
    corpus = {str(r["id"]): r["text"] for r in rows}
    return data, path, run, queries, corpus


def test_both_rerankers_score_from_a_real_servers_logprobs(gemma_url, sample, tmp_path):
    _, _, run, queries, corpus = sample
    rank1 = make_reranker("rank1-7b", {"base_url": gemma_url + "/v1", "llm_model": "gemma", "max_tokens": 16, "concurrency": 2},
                          Runtime(cache_dir=tmp_path / "home", progress=False))
    reranked = rank1.rerank(queries, corpus, run, top_k=TOP_K)
    counts = rank1.scorer.counts
    assert counts.from_trace + counts.forced + counts.fallback == N_QUERIES * TOP_K
    assert counts.forced + counts.fallback >= 1  # a 16-token trace of Gemma does not end in "</think> true"
    assert sorted(reranked) == sorted(run) and all(len(reranked[q]) == TOP_K for q in run)
    qwen = make_reranker("qwen3-reranker-0.6b", {"via_server": True, "base_url": gemma_url + "/v1", "llm_model": "gemma",
                                                 "concurrency": 2}, Runtime(cache_dir=tmp_path / "home", progress=False))
    scores = qwen.scorer.score([queries[q] for q in run for _ in range(1)], [corpus[next(iter(run[q]))] for q in run])
    assert rank1.scorer.requests.requests_sent >= N_QUERIES * TOP_K and qwen.scorer.requests.requests_sent == N_QUERIES
    # each score is the card's rule applied to the top logprobs llama.cpp returned (stored in the response cache)
    records = [json.loads(line) for line in (tmp_path / "home" / "rerank" / "completions" / "gemma.jsonl").read_text()
               .splitlines()]
    one_token = [r for r in records if r["completion_tokens"] == 1 and r["stop"] is None and r["positions"] == 1]
    tops = [r["last_top_logprobs"] for r in records]
    assert all(len(top) == 20 for top in tops)  # the server honoured logprobs: 20
    expected = []
    for top in one_token[-N_QUERIES:]:
        yes, no = top["last_top_logprobs"].get("yes", -10.0), top["last_top_logprobs"].get("no", -10.0)
        expected.append(math.exp(yes) / (math.exp(yes) + math.exp(no)))
    assert sorted(scores) == pytest.approx(sorted(expected), abs=1e-12)


def _keys(bodies, task):
    from r2med.llm.client import SamplingParams
    from r2med.rerankers.completions import TextRequest

    out = []
    for body in bodies:
        extra = {k: body[k] for k in ("skip_special_tokens", "allowed_token_ids") if k in body}
        params = SamplingParams(body.get("temperature"), body.get("top_p"), body.get("max_tokens"), body.get("seed"))
        out.append(TextRequest(body["prompt"], params, tuple(body.get("stop", ())), body["logprobs"], extra).key(
            body["model"], task))
    return out


def test_a_rerun_after_sigkill_sends_no_finished_request_again(gemma_url, sample, tmp_path):
    from r2med.rerankers.rank1 import TASK

    data, first_stage, _, _, _ = sample
    home, out = tmp_path / "home", tmp_path / "results"
    proxy = CountingProxy(gemma_url)
    argv = [sys.executable, "-c", RUNNER, "--run", str(first_stage), "--system", "first", "--reranker", "rank1-7b",
            "--llm-model", "gemma", "--base-url", proxy.base_url, "--max-tokens", "16", "--concurrency", "2",
            "--top-k", str(TOP_K), "--tasks", "scifact", "--data-dir", str(data), "--output", str(out), "-q"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_HOME": str(home)}
    cache = home / "rerank" / "completions" / "gemma.jsonl"
    try:
        first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None:
            if cache.exists() and len(cache.read_text().splitlines()) >= 3:
                first.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()
        done = [json.loads(line)["key"] for line in cache.read_text().splitlines() if line.strip()]
        assert len(done) >= 3 and set(done) <= set(_keys(proxy.bodies, TASK))
        sent_before = len(proxy.bodies)
        second = subprocess.run(argv[:-1] + ["--json"], env=env, capture_output=True, text=True, timeout=500, check=False)
        assert second.returncode == 0, second.stderr
        resent = _keys(proxy.bodies[sent_before:], TASK)
    finally:
        proxy.close()
    assert set(resent).isdisjoint(done) and len(resent) == len(set(resent))  # no finished request sent again
    table = json.loads(second.stdout)
    assert "scifact" in table
    stored = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
    assert len({r["key"] for r in stored}) == len(done) + len(resent)
    assert (out / "reranker" / "rank1-7b" / "first" / f"top_{TOP_K}" / "scifact.run").is_file()
