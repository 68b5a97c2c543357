"""ReasonRank, Rank1 and Qwen3-Reranker end to end on the bundled 50-query sample (``r2med datasets sample``): BM25's
top 20 of every query reranked through llama.cpp (``xllamacpp``) serving Gemma-3 270M (one server for the module,
two slots, ``--swa-full``; ``tests/llm_helpers.py``), with small budgets so that the three fit in minutes on two
cores: ReasonRank one window per query, Rank1 and Qwen3-Reranker 1,000 pairs each.

Each run is killed with SIGKILL midway and run again to the end; what went over the wire is counted through a proxy.
Checked: the rerun sends no request the first run finished (by the response cache's keys, or for ReasonRank by the
counts that pin them), every query is reranked with a permutation of BM25's top k and strictly decreasing scores,
the result is evaluated and stored, and the cost line says what the proxy saw: the rerun's requests and tokens, and
the result's tokens per query (each request's last answer over the wire, first run's and rerun's together).

Gemma is none of the three models: the numbers are poor, the point is the machinery. The budgets: ReasonRank's
passages cut to DOC_MAXLEN tokens of a byte-level tokenizer with Gemma's chat template, MAX_TOKENS generated;
Rank1 and Qwen3-Reranker read a copy of the sample whose passages are cut to RANK1_DOC_CHARS characters (Rank1's
authors cut nothing, so it has no passage budget to set; Qwen3-Reranker's cut needs the served model's tokenizer,
and Gemma's is not here: a byte-level one with Gemma's byte-token ids made each request 500 tokens that llama.cpp
evaluated whole, 5 s a request here; the token-id cut is tested against a fake server in test_qwen3_reranker.py),
RANK1_TRACE-token traces, then Rank1's forced one-token answer, sent right after its trace in the same slot.

What a request costs (measured on this 2-core machine, one llama.cpp thread, two slots): a Qwen3-Reranker prompt is
~129 Gemma tokens, of which the system prefix, instruction and query are shared by a query's pairs (pairs go query
by query). Gemma-3's sliding-window layers keep only the window's last tokens unless llama.cpp gets ``--swa-full``,
and then each prompt was evaluated whole: 0.57 s a pair, 1,000 pairs ~10 min for Qwen3-Reranker alone (hence the
top 3 this test once reranked). With ``--swa-full`` a slot reuses the shared prefix and evaluates ~37 tokens: 0.19 s a
Qwen3-Reranker pair, 0.21 s a Rank1 pair (a 63-token trace prompt, ~35 of it evaluated, and its forced answer, ~3).
The module, run alone: 8 min 19 s wall (ReasonRank 91 s, Rank1 212 s, Qwen3-Reranker 192 s, each call the killed
run and the rerun; the proxy adds ~3 ms a request, TCP_NODELAY on it changed nothing measurable).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from completions_server import CountingProxy

from llm_helpers import gemma_server

pytestmark = pytest.mark.slow

TOP_K, N_QUERIES, CONCURRENCY = 20, 50, 2
DOC_MAXLEN, MAX_TOKENS = 24, 8  # ReasonRank: bytes per passage, tokens per answer
RANK1_DOC_CHARS, RANK1_TRACE = 60, 1  # Rank1 and Qwen3-Reranker: characters per passage; Rank1: tokens per trace
GEMMA_BYTE_OFFSET = 238  # Gemma-3's byte-fallback token <0xNN> has id 238 + NN (llama.cpp's /detokenize says so)
SYSTEM = "bm25"
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def gemma_url(tmp_path_factory):
    # two slots of 2,048 tokens; llama.cpp reuses each slot's prompt prefix (the query's part of the prompt)
    yield from gemma_server(tmp_path_factory, n_ctx=4096, n_parallel=CONCURRENCY, swa_full=True)


def environment(home: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}


def r2med(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "r2med.cli", *args], env=environment(home), capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The bundled sample, copied by ``r2med datasets sample``, and BM25's run on it (top 100 per query)."""
    root = tmp_path_factory.mktemp("sample")
    home = root / "home"
    done = r2med("datasets", "sample", str(root / "data"), home=home)
    assert done.returncode == 0, done.stderr
    data = root / "data" / "scifact-sample"
    done = r2med("run", "--retriever", "bm25", "--data-dir", str(data), "--output", str(root / "out"), "-q", home=home)
    assert done.returncode == 0, done.stderr
    run: dict[str, list[str]] = {}
    for line in (root / "out" / "base retriever" / "bm25" / "scifact-sample.run").read_text().splitlines():
        qid, _, doc, _, _, _ = line.split()
        run.setdefault(qid, []).append(doc)
    assert len(run) == N_QUERIES and all(len(docs) >= TOP_K for docs in run.values())
    return data, root / "out" / "base retriever" / "bm25" / "scifact-sample.run", run


def gemma_byte_tokenizer(template: str | None = None):
    """A byte-level tokenizer whose id for byte b is Gemma's byte token, 238 + b (the ids spell the text for Gemma)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from test_qwen3_reranker import bytes_to_unicode

    vocab = {char: GEMMA_BYTE_OFFSET + b for b, char in bytes_to_unicode().items()}
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    if template:
        out.chat_template = template
    return out


def kill_and_rerun(argv: list[str], home: Path, cache: Path, kill_after: int, proxy: CountingProxy):
    """Run ``r2med`` with ``argv``, SIGKILL it once ``cache`` holds ``kill_after`` responses, wait for the requests in
    flight to be answered (to nobody), rerun it to the end; returns (finished lines at the kill, first run's answers,
    the rerun's answers, the rerun)."""
    first = subprocess.Popen([sys.executable, "-m", "r2med.cli", *argv], env=environment(home),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if cache.exists() and len(cache.read_text().splitlines()) >= kill_after:
                first.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()[-3000:]
    deadline = time.monotonic() + 60
    while len(proxy.answers) < len(proxy.bodies) and time.monotonic() < deadline:
        time.sleep(0.05)  # the requests in flight at the kill are answered, to nobody
    finished = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
    before = list(proxy.answers)
    assert len(before) == len(proxy.bodies) and kill_after <= len(finished) < len(before) + 1
    second = subprocess.run([sys.executable, "-m", "r2med.cli", *argv], env=environment(home), capture_output=True,
                            text=True, timeout=900, check=False)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Traceback" not in second.stderr, second.stderr[-3000:]
    return finished, before, proxy.answers[len(before):], second


def shown(stderr: str) -> str:
    """What a run printed, less its progress bars (the warnings, the nDCG line, the cost line)."""
    found = (re.search(r"(r2med|scifact-sample): .*", line) for line in stderr.replace("\r", "\n").splitlines())
    return "\n".join(match.group(0) for match in found if match is not None)


def completions(answers) -> list[tuple[dict, dict]]:
    return [(body, usage) for path, body, usage in answers if path.endswith("/completions")]


def identity(body: dict) -> str:
    """What makes a request that request (its prompt, text or ids, and how much it may generate)."""
    return json.dumps([body["prompt"], body.get("max_tokens"), body.get("logprobs")])


def expected_cost(before, after, unit: str, count: int, cached: int) -> str:
    """The cost line worked out from the wire: the rerun's requests and tokens; per query, the tokens of each
    request's last answer (first run's and rerun's together)."""
    last: dict[str, dict] = {}
    for body, usage in completions(before) + completions(after):
        last[identity(body)] = usage
    prompt = sum(u["prompt_tokens"] for u in last.values())
    completion = sum(u["completion_tokens"] for u in last.values())
    sent = completions(after)
    return (f"cost per query: {prompt / N_QUERIES:,.0f} prompt + {completion / N_QUERIES:,.0f} completion tokens "
            f"({N_QUERIES} queries, {count:,} {unit}, {cached:,} from the cache; this run sent {len(sent):,} requests, "
            f"{sum(u['prompt_tokens'] for _, u in sent):,} + {sum(u['completion_tokens'] for _, u in sent):,} tokens)")


def check_result(out: Path, reranker: str, bm25: dict[str, list[str]], stderr: str, top_k: int = TOP_K) -> None:
    """Every query reranked: its top k a permutation of BM25's, then BM25's tail; scores strictly decreasing; the
    result evaluated (nDCG@10 printed and stored) and its manifest written."""
    where = out / "reranker" / reranker / SYSTEM / f"top_{top_k}"
    rows: dict[str, list[tuple[str, float]]] = {}
    for line in (where / "scifact-sample.run").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        rows.setdefault(qid, []).append((doc, float(score)))
    assert sorted(rows) == sorted(bm25)
    for qid, ranked in rows.items():
        docs = [d for d, _ in ranked]
        assert sorted(docs[:top_k]) == sorted(bm25[qid][:top_k]) and docs[top_k:] == bm25[qid][top_k:]
        assert all(a > b for (_, a), (_, b) in itertools.pairwise(ranked))
    stored = json.loads((where / "scifact-sample.json").read_text())
    shown = re.search(r"scifact-sample: nDCG@10 ([\d.]+) \(50 queries, [\d.]+ s\)", stderr)
    assert shown is not None, stderr[-3000:]
    assert json.dumps(stored).count("ndcg_at_10") >= 1 and (where / "scifact-sample.manifest.json").is_file()


def test_reasonrank_on_the_sample(gemma_url, sample, tmp_path):
    from test_reasonrank import GEMMA_TEMPLATE

    pytest.importorskip("ftfy", reason="ftfy (the llm extra) is needed for ReasonRank's prompt")
    data, first_stage, bm25 = sample
    tokenizer = tmp_path / "tokenizer"
    gemma_byte_tokenizer(GEMMA_TEMPLATE).save_pretrained(tokenizer)
    home, out = tmp_path / "home", tmp_path / "out"
    proxy = CountingProxy(gemma_url)
    argv = ["rerank", "--run", str(first_stage), "--system", SYSTEM, "--reranker", "reasonrank-7b",
            "--tokenizer", str(tokenizer), "--base-url", proxy.base_url, "--top-k", str(TOP_K), "--doc-maxlen",
            str(DOC_MAXLEN), "--max-tokens", str(MAX_TOKENS), "--concurrency", str(CONCURRENCY),
            "--data-dir", str(data), "--output", str(out)]
    cache = home / "rerank" / "reasonrank" / "liuwenhan__reasonrank-7B.jsonl"
    try:
        finished, before, after, second = kill_and_rerun(argv, home, cache, 10, proxy)
    finally:
        proxy.close()
    # one window per query; the rerun sent each window the first run did not finish, and none that it did: the
    # prompts sent twice are the ones in flight at the kill (pinned by the counts, as in test_reasonrank_resume)
    sent_before = [identity(b) for b, _ in completions(before)]
    sent_after = [identity(b) for b, _ in completions(after)]
    assert len(sent_after) == len(set(sent_after)) == N_QUERIES - len(finished)
    twice = set(sent_before) & set(sent_after)
    assert len(twice) <= CONCURRENCY and len(sent_before) - len(twice) == len(finished)
    assert len(set(sent_before) | set(sent_after)) == N_QUERIES
    assert sorted(r["qid"] for r in finished) == sorted({r["qid"] for r in finished})
    check_result(out, "reasonrank-7b", bm25, second.stderr)
    windows = [json.loads(line) for line in (out / "reranker" / "reasonrank-7b" / SYSTEM / "top_20" /
                                             "scifact-sample.windows.jsonl").read_text().splitlines()]
    assert sorted(w["qid"] for w in windows) == sorted(bm25) and all(len(w["docids"]) == TOP_K for w in windows)
    cost = expected_cost(before, after, "windows", N_QUERIES, len(finished))
    assert f"scifact-sample: {cost}" in second.stderr, second.stderr[-3000:]
    print(shown(second.stderr))
    # recomputed with --force, the proxy gone: every window from the cache, nothing sent, the same run
    run_file = out / "reranker" / "reasonrank-7b" / SYSTEM / "top_20" / "scifact-sample.run"
    reranked = run_file.read_bytes()
    again = r2med(*argv, "--force", home=home)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(50 queries, 50 windows, 50 from the cache; this run sent 0 requests, 0 + 0 tokens)" in again.stderr
    assert run_file.read_bytes() == reranked


def _pointwise_keys(bodies, task: str) -> list[str]:
    from r2med.llm.client import SamplingParams
    from r2med.rerankers.completions import TextRequest

    out = []
    for body in bodies:
        extra = {k: body[k] for k in ("skip_special_tokens", "allowed_token_ids") if k in body}
        params = SamplingParams(body.get("temperature"), body.get("top_p"), body.get("max_tokens"), body.get("seed"))
        prompt = body["prompt"] if isinstance(body["prompt"], str) else tuple(body["prompt"])
        out.append(TextRequest(prompt, params, tuple(body.get("stop", ())), body["logprobs"], extra).key(
            body["model"], task))
    return out


def check_pointwise_resume(finished, before, after, cache: Path, task: str) -> None:
    """No finished request (a key in the response cache at the kill) went to the server again; each one the rerun
    sent, it sent once; the cache ends with every request of both runs once."""
    done = [r["key"] for r in finished]
    sent_before = _pointwise_keys([b for b, _ in completions(before)], task)
    resent = _pointwise_keys([b for b, _ in completions(after)], task)
    assert set(done) <= set(sent_before) and len(done) == len(set(done))
    assert set(resent).isdisjoint(done) and len(resent) == len(set(resent))
    assert len(set(sent_before) - set(done)) <= CONCURRENCY  # only those in flight at the kill were lost
    stored = [json.loads(line)["key"] for line in cache.read_text().splitlines() if line.strip()]
    assert len(stored) == len(set(stored)) == len(done) + len(resent)


def score_cached(stderr: str, finished: list, pairs: int) -> int:
    """The pairs the rerun found in the score cache: none, since the first run writes its scores every 1,024 pairs
    and at the end, and SIGKILL came before either (the responses it had are in the response cache)."""
    found = re.search(rf"\(50 queries, {pairs:,} pairs, ([\d,]+) from the cache", stderr)
    assert found is not None, stderr[-3000:]
    assert found.group(1) == "0" and pairs < 1024 and finished
    return 0


@pytest.fixture(scope="module")
def short_sample(sample, tmp_path_factory):
    """The sample with every passage cut to RANK1_DOC_CHARS characters (for Rank1, which has no passage budget of its
    own, and Qwen3-Reranker through a server without the served model's tokenizer)."""
    data, first_stage, bm25 = sample
    target = tmp_path_factory.mktemp("short") / "scifact-sample"
    target.mkdir()
    for name in ("query.jsonl", "qrels.jsonl"):
        (target / name).write_bytes((data / name).read_bytes())
    rows = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines()]
    (target / "corpus.jsonl").write_text("".join(json.dumps({**r, "text": r["text"][:RANK1_DOC_CHARS]}) + "\n"
                                                 for r in rows))
    return target, first_stage, bm25


def test_rank1_on_the_sample(gemma_url, short_sample, tmp_path):
    from r2med.rerankers.rank1 import TASK

    data, first_stage, bm25 = short_sample
    home, out = tmp_path / "home", tmp_path / "out"
    proxy = CountingProxy(gemma_url)
    argv = ["rerank", "--run", str(first_stage), "--system", SYSTEM, "--reranker", "rank1-7b", "--llm-model", "gemma",
            "--base-url", proxy.base_url, "--max-tokens", str(RANK1_TRACE), "--concurrency", str(CONCURRENCY),
            "--top-k", str(TOP_K), "--data-dir", str(data), "--output", str(out)]
    cache = home / "rerank" / "completions" / "gemma.jsonl"
    try:
        finished, before, after, second = kill_and_rerun(argv, home, cache, 60, proxy)
    finally:
        proxy.close()
    check_pointwise_resume(finished, before, after, cache, TASK)
    check_result(out, "rank1-7b", bm25, second.stderr)
    # every pair's trace, and a forced answer for each trace that did not end in "</think> true|false"
    traces = [b for b, _ in completions(before + after) if b.get("stop")]  # the forced answers have no stop strings
    assert len({identity(b) for b in traces}) == N_QUERIES * TOP_K
    where = out / "reranker" / "rank1-7b" / SYSTEM / f"top_{TOP_K}"
    manifest = json.loads((where / "scifact-sample.manifest.json").read_text())
    assert "reranker_stats" in json.dumps(manifest)
    pairs = N_QUERIES * TOP_K
    cost = expected_cost(before, after, "pairs", pairs, score_cached(second.stderr, finished, pairs))
    assert f"scifact-sample: {cost}" in second.stderr, second.stderr[-3000:]
    print(shown(second.stderr))


def test_qwen3_reranker_on_the_sample(gemma_url, short_sample, tmp_path):
    from r2med.rerankers.qwen3 import TASK, qwen3_prompt

    data, first_stage, bm25 = short_sample
    home, out = tmp_path / "home", tmp_path / "out"
    proxy = CountingProxy(gemma_url)
    argv = ["rerank", "--run", str(first_stage), "--system", SYSTEM, "--reranker", "qwen3-reranker-0.6b",
            "--via-server", "--llm-model", "gemma", "--base-url", proxy.base_url, "--concurrency", str(CONCURRENCY),
            "--top-k", str(TOP_K), "--data-dir", str(data), "--output", str(out)]
    cache = home / "rerank" / "completions" / "gemma.jsonl"
    try:
        finished, before, after, second = kill_and_rerun(argv, home, cache, 60, proxy)
    finally:
        proxy.close()
    check_pointwise_resume(finished, before, after, cache, TASK)
    check_result(out, "qwen3-reranker-0.6b", bm25, second.stderr)
    # one request per pair: the card's text (no tokenizer of Gemma here, so not cut: a warning says so)
    queries = {json.loads(line)["id"]: json.loads(line)["text"] for line in (data / "query.jsonl").read_text().splitlines()}
    corpus = {json.loads(line)["id"]: json.loads(line)["text"] for line in (data / "corpus.jsonl").read_text().splitlines()}
    expected = {qwen3_prompt(queries[qid], corpus[doc]) for qid, docs in bm25.items() for doc in docs[:TOP_K]}
    assert {b["prompt"] for b, _ in completions(before + after)} == expected
    assert "each pair goes to the server whole, not cut to 8192 tokens" in second.stderr
    pairs = N_QUERIES * TOP_K
    cost = expected_cost(before, after, "pairs", pairs, score_cached(second.stderr, finished, pairs))
    assert f"scifact-sample: {cost}" in second.stderr, second.stderr[-3000:]
    print(shown(second.stderr))
