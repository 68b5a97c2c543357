"""Agent throughput: ``run_agent`` with many queries in flight against the authors' shape (one query at a time, each
request after the other, as Search-R1's ``infer.py`` and a per-question Search-o1 loop run), on the same server,
the same SciFact queries and the same BM25 searcher, as a ratio.

    python benchmarks/agent.py [--style search-r1|search-o1] [--queries 128] [--concurrency 16] [--latency 0.2]

The server is the scripted completion server (``tests/agent/completion_server.py``, in its own process) answering
every request after a fixed ``--latency`` (default 200 ms) with no compute of its own: the time a remote API or a
batching GPU server spends per request, which concurrency overlaps. Its script makes two searches per question,
then answers: Search-R1 sends 3 requests per query, Search-o1 5 (3 turns + 2 Reason-in-Documents calls), so the
sequential Search-R1 run takes about queries x 3 x latency (~80 s for the defaults).

Both variants are the same ``run_agent`` (only ``concurrency`` differs) with a BM25 searcher over SciFact's corpus
opened once before either is timed; each starts from an empty output folder, so no response comes from an earlier
run (within a run, Search-o1's queries that open with the same search share one Reason-in-Documents request).
The two are compared: the concurrent run must send as many requests and write the same expansions and trajectories.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_servers import server_process

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def timed(dataset, config, searcher) -> tuple[float, object, dict[str, bytes]]:
    """One ``run_agent`` from an empty output folder: seconds, the report and the files it wrote."""
    from r2med.agent.loop import run_agent

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        report = run_agent(dataset, config, searcher, out_dir=Path(out), progress=False)
        seconds = time.perf_counter() - start
        files = {name: (Path(out) / name).read_bytes() for name in ("query_with_hydoc.jsonl", "trajectories.jsonl")}
    assert report.complete and report.written == len(dataset.queries), report.as_dict()
    return seconds, report, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--style", choices=["search-r1", "search-o1"], default="search-r1")
    parser.add_argument("--queries", type=int, default=128, help="SciFact queries (default 128)")
    parser.add_argument("--concurrency", type=int, default=16, help="queries in flight in the concurrent run")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per request")
    args = parser.parse_args()

    from r2med.agent.loop import AgentConfig
    from r2med.agent.search import open_searcher
    from r2med.datasets import load_dir
    from r2med.retrievers.bm25.retriever import BM25Retriever

    dataset = load_dir(SHARED / "data" / "scifact", "scifact")
    queries = replace(dataset, queries=dict(list(dataset.queries.items())[: args.queries]))
    start = time.perf_counter()
    searcher = open_searcher(BM25Retriever(cache_dir=None, progress=False), dataset)
    print(f"SciFact, {len(queries.queries)} queries, {args.style}, BM25 over {len(dataset.corpus)} documents "
          f"(indexed once in {time.perf_counter() - start:.1f} s), server latency {args.latency * 1000:.0f} ms, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n", flush=True)

    rows = []
    with server_process("agent", "completion_server", "CompletionServer", args.latency) as base_url:
        for label, concurrency in (("sequential (1 query at a time)", 1), (f"concurrent ({args.concurrency} in flight)",
                                                                           args.concurrency)):
            config = AgentConfig(style=args.style, llm_model="fake", base_url=base_url, chat_template="chatml", concurrency=concurrency)
            seconds, report, files = timed(queries, config, searcher)
            rows.append((label, seconds, report, files))
            print(f"# {label}: {seconds:.2f} s, {report.llm_calls} requests, {report.searches} searches", flush=True)
    (_, t_seq, _, seq_files), (_, t_con, _, con_files) = rows
    same = "yes" if seq_files == con_files and rows[0][2].llm_calls == rows[1][2].llm_calls else "NO"
    print()
    print("| loop | seconds | queries/s | requests/s | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for label, seconds, report, _ in rows:
        print(f"| {label} | {seconds:.2f} | {len(queries.queries) / seconds:.2f} | {report.llm_calls / seconds:.1f} | "
              f"{t_seq / seconds:.2f}x |")
    print(f"\nspeed-up {t_seq / t_con:.2f}x (required: >= 8x); same requests, expansions and trajectories: {same}")
    return 0 if same == "yes" else 1


if __name__ == "__main__":
    sys.exit(main())
