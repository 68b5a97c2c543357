"""BM25 speed and memory: r2med's two variants against R2MED's official pipeline and bm25s.

Every system runs end to end in this one process on the same files: load the JSONL, analyse,
index, search every query, write a TREC run of the top 100. Printed as ratios (peer / r2med).

    python benchmarks/bm25.py                      # SciFact + the synthetic 61,379-document corpus
    python benchmarks/bm25.py --datasets scifact --memory --repeat 3

Needs r2med installed; the peers are optional (skipped with a message): the official pipeline needs
``pip install --no-deps pyserini==0.22.1 pyjnius gensim`` and Java 17, bm25s needs ``pip install bm25s PyStemmer``.
Peak memory (--memory) is measured in a second pass under tracemalloc: Python and NumPy allocations,
not the JVM's heap.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers import bm25s_available, official_available, run_bm25s, run_official
from synthetic import make_synthetic

SHARED = HERE.parent.parent / "shared"


def run_r2med(variant: str, cache: Path | None) -> Callable[[Path, Path], None]:
    def run(folder: Path, out: Path) -> None:
        from r2med.datasets import load_dir
        from r2med.retrievers.bm25.retriever import BM25Retriever
        from r2med.store.runs import write_trec_run

        dataset = load_dir(folder)
        retriever = BM25Retriever(variant=variant, cache_dir=cache, progress=False)
        write_trec_run(retriever.retrieve(dataset, top_k=100), out)

    return run


def measure(fn: Callable[[Path, Path], None], folder: Path, out: Path, *, memory: bool, repeat: int) -> tuple[float, float | None]:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn(folder, out)
        best = min(best, time.perf_counter() - start)
    peak = None
    if memory:
        gc.collect()
        tracemalloc.start()
        fn(folder, out)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return best, peak


def compare_runs(ours: Path, ref: Path) -> str:
    """'identical' when both runs list the same documents in the same order with scores within 1e-4."""
    def read(path: Path) -> list[tuple[str, str, float]]:
        return [(f[0], f[2], float(f[4])) for f in (line.split() for line in path.read_text().splitlines())]

    a, b = read(ours), read(ref)
    if [(q, d) for q, d, _ in a] != [(q, d) for q, d, _ in b]:
        same = sum(1 for x, y in zip(a, b) if x[:2] == y[:2])
        return f"DIFFERENT ({same}/{len(b)} lines agree)"
    worst = max((abs(x[2] - y[2]) for x, y in zip(a, b)), default=0.0)
    return f"identical (max score diff {worst:.1e})" if worst < 1e-4 else f"scores differ by {worst:.1e}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="scifact,synthetic", help="comma-separated: scifact, synthetic")
    parser.add_argument("--repeat", type=int, default=1, help="best of N timings (default 1)")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory (a second pass under tracemalloc)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "r2med-bench")
    args = parser.parse_args()

    scifact = SHARED / "data" / "scifact"
    folders = {"scifact": scifact, "synthetic": args.work / "synthetic"}
    peers: dict[str, Callable[[Path, Path], None]] = {}
    for name, available, fn in (("official", official_available, run_official), ("bm25s", bm25s_available, run_bm25s)):
        why = available()
        if why:
            print(f"# skipping {name}: {why}")
        else:
            peers[name] = fn
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if "synthetic" in datasets:
        make_synthetic(scifact, folders["synthetic"])
    caches = {d: Path(tempfile.mkdtemp(prefix="r2med-bm25-cache-")) for d in datasets}
    for dataset in datasets:  # fills the cache for the "index cached" row
        run_r2med("r2med", caches[dataset])(folders[dataset], args.work / f"warmup-{dataset}.run")
    systems = {
        "r2med (r2med variant)": lambda d: run_r2med("r2med", None),
        "r2med (lucene variant)": lambda d: run_r2med("lucene", None),
        "r2med (r2med variant, index cached)": lambda d: run_r2med("r2med", caches[d]),
        **{name: (lambda d, fn=fn: fn) for name, fn in peers.items()},  # the official one last: it starts a JVM
    }
    timings: dict[tuple[str, str], tuple[float, float | None, Path]] = {}
    for name, make in systems.items():
        for dataset in datasets:
            runs = args.work / "runs" / dataset
            runs.mkdir(parents=True, exist_ok=True)
            out = runs / (name.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "") + ".run")
            seconds, peak = measure(make(dataset), folders[dataset], out, memory=args.memory, repeat=args.repeat)
            timings[(dataset, name)] = (seconds, peak, out)
            print(f"# {dataset}: {name}: {seconds:.2f} s" + (f", peak {peak:.0f} MiB" if peak is not None else ""), flush=True)
    rows = []
    for dataset in datasets:
        base, _, base_run = timings[(dataset, "r2med (r2med variant)")]
        for name in systems:
            seconds, peak, out = timings[(dataset, name)]
            same = "r2med variant: " + compare_runs(base_run, out) if name == "official" else ""
            rows.append((dataset, name, seconds, seconds / base, peak, same))
    print()
    print("| dataset | system | seconds | time / r2med | peak MiB | results |")
    print("|---|---|---:|---:|---:|---|")
    for dataset, name, seconds, ratio, peak, same in rows:
        mem = f"{peak:.0f}" if peak is not None else "-"
        print(f"| {dataset} | {name} | {seconds:.2f} | {ratio:.2f}x | {mem} | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
