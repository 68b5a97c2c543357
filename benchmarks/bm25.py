"""BM25 speed, end to end: r2med against R2MED's official pipeline and bm25s, plus where r2med's time goes.

    python benchmarks/bm25.py                         # synthetic corpus, 5 alternating rounds, quick start too
    python benchmarks/bm25.py --repeats 3 --no-official

Three measurements, each in fresh processes (so start-up and imports count, as they do for a user):

1. End to end, alternating: each round runs every system once, in turn, as its own process: r2med as a user
   runs it (``r2med run -q --retriever bm25 --data-dir DIR``, a fresh ``R2MED_HOME``, so no cached index), bm25s
   and the official pipeline (``benchmarks/peers.py``: load the JSONL, analyse, index, search every query, write a
   TREC run of the top 100). Wall seconds, and CPU seconds (user + system of the process and every process it
   waited for: r2med's forked analysis workers where its C kernel is not built, the JVM's threads). Medians over
   the rounds, and each peer's median over r2med's (wall and CPU). r2med's run is compared with the official one (same documents in the same
   order, scores within 1e-4).
2. Per phase: the same run, one phase at a time, in a fresh process (``--phases-only`` runs it alone):
   start-up (imports), load (read and check the JSONL files), analysis (tokenise, filter, stem, count, on every
   core), index (BM25 weights), score (analyse the queries, score, top 100), write (the TREC run), verify
   (evaluate the run against the qrels: nDCG@10, R@100). Wall and CPU seconds, medians over the rounds.
3. The quick start: ``r2med run --data-dir r2med-sample`` (SciFact's 50-query sample), fresh results folder and
   fresh ``R2MED_HOME`` each time: median wall of ``--quickstart-runs`` runs.

r2med's package is byte-compiled first, as ``pip install`` does for an installed package (the peers' included):
no run compiles r2med's modules from source, which a source checkout under ``PYTHONDONTWRITEBYTECODE`` would.

The load average is printed before and after: on a busy machine wall seconds grow, CPU seconds much less.
Peers are optional (skipped with a message): the official pipeline needs
``pip install --no-deps pyserini==0.22.1 pyjnius gensim`` and ``pip install smart_open`` and Java 11+; bm25s needs
``pip install bm25s PyStemmer``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers import bm25s_available, official_available
from synthetic import make_synthetic

SHARED = HERE.parent.parent / "shared"
PHASES = ("start-up", "load", "analysis", "index", "score", "write", "verify")

#: run in a fresh interpreter: each phase of an r2med BM25 run, timed; prints one JSON line
_PHASE_SCRIPT = r"""
import json, os, sys, time
def cpu():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
marks = [("start", time.perf_counter(), cpu())]
def mark(name):
    marks.append((name, time.perf_counter(), cpu()))
from pathlib import Path
from r2med.datasets import load_dir
from r2med.evaluation import evaluate
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.index import BM25Index, BM25Params
from r2med.retrievers.bm25.parallel import analyze_and_count
from r2med.store.runs import write_trec_run
from r2med.types import Run
mark("start-up")
folder, out = Path(sys.argv[1]), Path(sys.argv[2])
dataset = load_dir(folder)
mark("load")
analyzer = EnglishAnalyzer()
vocabulary, counts = analyze_and_count(dataset.doc_texts, analyzer)
mark("analysis")
index = BM25Index(params=BM25Params(variant="r2med"), vocabulary=vocabulary, counts=counts, doc_ids=list(dataset.doc_ids))
mark("index")
qids = list(dataset.queries)
run = Run(index.search_run(qids, analyzer.analyze_many([dataset.queries[q] for q in qids]), k=100), name="bm25")
mark("score")
write_trec_run(run, out)
mark("write")
scores = evaluate(dataset.qrels, run, metrics=["ndcg_at_10", "recall_at_100"])
mark("verify")
phases = {name: (t - marks[i][1], c - marks[i][2]) for i, (name, t, c) in enumerate(marks[1:])}
print(json.dumps({"phases": phases}))
"""

_PEER_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import peers
getattr(peers, sys.argv[2])(Path(sys.argv[3]), Path(sys.argv[4]))
"""


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``cmd``; its wall seconds, its CPU seconds (with the processes it waited for) and its stdout."""
    cpu0, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return wall, cpu, done.stdout


def byte_compile_r2med() -> str:
    """Byte-compile the r2med package the runs import, as ``pip install`` does for an installed package (and did
    for the peers' packages); the package's folder.

    Without it a source checkout under ``PYTHONDONTWRITEBYTECODE`` (or a read-only one) compiles r2med's ~200
    modules from source in every run: about 0.1 s a run that no user of an installed r2med pays.
    """
    where = subprocess.run([sys.executable, "-c", "import os, r2med; print(os.path.dirname(r2med.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if not compileall.compile_dir(where, quiet=1):
        raise SystemExit(f"could not byte-compile {where}")
    return where


def r2med_command() -> list[str]:
    script = Path(sys.executable).with_name("r2med")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "r2med.cli"]


def run_r2med(folder: Path, work: Path) -> tuple[float, float, Path]:
    home, out = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "R2MED_HOME": str(home)}
    wall, cpu, _ = timed([*r2med_command(), "run", "-q", "--retriever", "bm25", "--data-dir", str(folder), "--output", str(out)], env)
    run = next(out.rglob("*.run"))
    kept = work / "r2med.run"
    shutil.copyfile(run, kept)
    shutil.rmtree(home), shutil.rmtree(out)
    return wall, cpu, kept


def run_peer(name: str, folder: Path, work: Path) -> tuple[float, float, Path]:
    out = work / f"{name}.run"
    wall, cpu, _ = timed([sys.executable, "-c", _PEER_SCRIPT, str(HERE), f"run_{name}", str(folder), str(out)])
    return wall, cpu, out


def run_phases(folder: Path, work: Path) -> dict[str, tuple[float, float]]:
    wall, cpu, stdout = timed([sys.executable, "-c", _PHASE_SCRIPT, str(folder), str(work / "phases.run")])
    phases = {name: tuple(v) for name, v in json.loads(stdout.strip().splitlines()[-1])["phases"].items()}
    inside = sum(w for w, _ in phases.values())
    phases["interpreter"] = (wall - inside, cpu - sum(c for _, c in phases.values()))
    return phases


def quickstart(work: Path, runs: int) -> list[float]:
    sample = work / "r2med-sample"
    if not sample.is_dir():
        timed([*r2med_command(), "datasets", "sample", str(sample)])
    walls = []
    for _ in range(runs):
        home, out = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
        env = {**os.environ, "R2MED_HOME": str(home)}
        wall, _, _ = timed([*r2med_command(), "run", "--data-dir", str(sample), "--output", str(out / "results")], env)
        walls.append(wall)
        shutil.rmtree(home), shutil.rmtree(out)
    return walls


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


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, help="a dataset directory (default: the synthetic corpus, made once)")
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--no-official", action="store_true", help="skip the official pipeline (about 40 s a run)")
    parser.add_argument("--no-bm25s", action="store_true", help="skip bm25s")
    parser.add_argument("--phases-only", action="store_true", help="only r2med's per-phase table")
    parser.add_argument("--quickstart-runs", type=int, default=5, help="runs of the quick start (0: skip; default 5)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "r2med-bench")
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    folder = args.data_dir or make_synthetic(SHARED / "data" / "scifact", args.work / "synthetic")
    print(f"# {folder}; {os.cpu_count()} cores; load average at start {load_average()}", flush=True)
    print(f"# r2med byte-compiled, as an installed package is: {byte_compile_r2med()}", flush=True)
    systems = {"r2med": run_r2med}
    if not args.phases_only:
        for name, available, skip in (("bm25s", bm25s_available, args.no_bm25s), ("official", official_available, args.no_official)):
            why = "--no-" + name if skip else available()
            if why:
                print(f"# skipping {name}: {why}")
            else:
                systems[name] = lambda f, w, name=name: run_peer(name, f, w)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
    phases: list[dict[str, tuple[float, float]]] = []
    runs: dict[str, Path] = {}
    started = time.perf_counter()
    for round_ in range(1, args.repeats + 1):
        if not args.phases_only:
            for name, fn in systems.items():
                wall, cpu, runs[name] = fn(folder, args.work)
                results[name].append((wall, cpu))
                print(f"# round {round_}: {name}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        phases.append(run_phases(folder, args.work))
        print(f"# round {round_}: r2med phases: " + ", ".join(f"{k} {w:.2f}" for k, (w, _) in phases[-1].items()), flush=True)
    walls = quickstart(args.work, args.quickstart_runs) if args.quickstart_runs else []
    print(f"# load average at end {load_average()}; {time.perf_counter() - started:.0f} s in all", flush=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    if not args.phases_only:
        base_wall = med([w for w, _ in results["r2med"]])
        base_cpu = med([c for _, c in results["r2med"]])
        print(f"\nEnd to end, medians of {args.repeats} alternating rounds:\n")
        print("| system | wall s | CPU s | wall / r2med | CPU / r2med | run |")
        print("|---|---:|---:|---:|---:|---|")
        for name, values in results.items():
            wall, cpu = med([w for w, _ in values]), med([c for _, c in values])
            same = compare_runs(runs["r2med"], runs[name]) if name == "official" else ""
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {wall / base_wall:.2f}x | {cpu / base_cpu:.2f}x | {same} |")
    print(f"\nr2med per phase (a fresh process; medians of {args.repeats}):\n")
    print("| phase | wall s | CPU s |")
    print("|---|---:|---:|")
    for name in ("interpreter", *PHASES):
        print(f"| {name} | {med([p[name][0] for p in phases]):.3f} | {med([p[name][1] for p in phases]):.3f} |")
    total = [sum(w for w, _ in p.values()) for p in phases]
    total_cpu = [sum(c for _, c in p.values()) for p in phases]
    print(f"| total | {med(total):.3f} | {med(total_cpu):.3f} |")
    if walls:
        print(f"\nQuick start (r2med run --data-dir r2med-sample, fresh R2MED_HOME): median {med(walls):.2f} s wall "
              f"of {len(walls)} ({', '.join(f'{w:.2f}' for w in walls)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
