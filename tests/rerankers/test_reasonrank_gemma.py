"""ReasonRank end to end with a real LLM server: ``r2med run --retriever bm25 --reranker reasonrank-7b`` on 5 SciFact
queries, top 20, against llama.cpp (``xllamacpp``) serving Gemma-3 270M (``tests/llm_helpers.py``).

A 270M model is no reranker: it rarely writes ``<answer>`` and stops at the token limit, so most windows fall to the
authors' fallbacks (the numbers of the whole text). That is what this test wants: whatever the model writes, every
window is parsed into a permutation, the run is stored with strictly decreasing scores, the cost line shows the
server's real token counts, and a forced rerun answers every window from the cache without a request. The prompt
goes through a byte-level tokenizer built here with Gemma's chat template (Gemma's own is not a Hugging Face
download away); the passages are cut to DOC_CHARS characters to keep the prompt near 2,000 Gemma tokens.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_reasonrank import GEMMA_TEMPLATE, byte_tokenizer

from llm_helpers import gemma_server, write_scifact_subset

pytestmark = pytest.mark.slow
pytest.importorskip("ftfy", reason="ftfy (the llm extra) is needed for ReasonRank's prompt")

N_QUERIES = 5
DOC_CHARS = 300
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    # two slots of 4096 tokens: 20 passages of 300 characters are ~1,700 Gemma tokens, + 48 generated
    yield from gemma_server(tmp_path_factory, n_ctx=8192, n_parallel=2)


def test_reasonrank_runs_to_the_end_with_gemma(gemma_url, tmp_path):
    data, qids = write_scifact_subset(tmp_path / "scifact", N_QUERIES, other_docs=100, doc_chars=DOC_CHARS)
    tokenizer = tmp_path / "tokenizer"
    byte_tokenizer(GEMMA_TEMPLATE).save_pretrained(tokenizer)
    home, out = tmp_path / "home", tmp_path / "out"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "r2med.cli", "run", "--retriever", "bm25", "--reranker", "reasonrank-7b",
               "--tokenizer", str(tokenizer), "--base-url", gemma_url + "/v1", "--rerank-top-k", "20",
               "--max-tokens", str(MAX_TOKENS), "--concurrency", "2", "--data-dir", str(data), "--output", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    where = out / "reranker" / "reasonrank-7b" / "bm25" / "top_20"
    windows = [json.loads(line) for line in (where / "scifact.windows.jsonl").read_text().splitlines()]
    assert [w["qid"] for w in windows] == qids  # one window of 20 per query
    for w in windows:
        assert sorted(w["order"]) == sorted(w["docids"]) and len(w["docids"]) == 20
        assert w["source"] in ("answer-tags", "after-answer-tag", "whole-text")
    rows: dict[str, list[float]] = {}
    for line in (where / "scifact.run").read_text().splitlines():
        qid, _, _, _, score, _ = line.split()
        rows.setdefault(qid, []).append(float(score))
    assert sorted(rows) == sorted(qids)
    assert all(all(a > b for a, b in itertools.pairwise(s)) for s in rows.values())
    cost = re.search(r"scifact: cost per query: ([\d,]+) prompt \+ ([\d,]+) completion tokens \(5 queries, 5 windows, "
                     r"0 from the cache; this run sent 5 requests, ([\d,]+) \+ ([\d,]+) tokens\)", done.stderr)
    assert cost is not None, done.stderr[-3000:]
    prompt_per_query, completion_per_query = (int(x.replace(",", "")) for x in cost.groups()[:2])
    assert 1000 < prompt_per_query < 4096 and 0 < completion_per_query <= MAX_TOKENS
    print(done.stderr)  # the real cost line, for the docs

    first_run = (where / "scifact.run").read_bytes()
    again = subprocess.run([*command, "--force"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "5 queries, 5 windows, 5 from the cache; this run sent 0 requests, 0 + 0 tokens" in again.stderr
    assert (where / "scifact.run").read_bytes() == first_run  # recomputed from the cached answers: the same run
