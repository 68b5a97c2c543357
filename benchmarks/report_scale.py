"""The HTML report at R2MED's size: 876 queries over the eight datasets, ten systems, the texts found through the
manifests; the page's size and the time ``r2med report`` takes to write it, for each source tree given.

    PYTHONPATH=src python benchmarks/report_scale.py --work /tmp/r2med-report-scale --src /work/main/src --src src

The store is synthetic and deterministic (seed 7): per dataset R2MED's query count, a corpus of 3,000 documents of
~155 words (R2MED's documents are ~155 words), three relevant documents per query, and per system a top-100 run, its
per-query values and result JSON, and a manifest that records the dataset directory (as ``r2med run`` writes it),
written with r2med's own store functions, so ``r2med report`` reads it as it reads a real run. Each report is
written by a fresh ``python -m r2med.cli report`` with ``PYTHONPATH`` set to the source tree given (``main`` vs a
branch), timed from outside (process start included), ``-q``; wall and CPU (user + system) seconds are printed with
the load average, since the machine may be shared.

Measured 2026-12-05 on the shared 2-CPU development machine, load average ~9-12 (other processes), best of 2:

    main (one page):   10.75 MB page, 14.14 s wall, 6.63 s CPU
    issue 38 branch:    0.45 MB page (10.84 MB with its 8 drill-down pages), 11.79 s wall, 4.25 s CPU

Measured again 2026-12-06 on the same machine, idle (load average 0.4-0.6, nothing else running), best of 3 after
byte-compiling ``src``: 0.45 MB page (10.84 MB with its 8 drill-down pages), 5.81 s wall, 6.08 s CPU; a second run of
three gave 7.63 s wall. So the idle wall time is the CPU time, and both are above the 5 s the issue asks for: reading
the 16 runs the drill-down compares takes 0.9 s (175,200 lines, every id and score checked), importing scipy.stats
about 1 s, the two figures about 1.5 s.

The page went from 10.75 MB to 0.45 MB: the query blocks (7 MB of them are the 17,520 documents' texts, two systems'
top 10 of 400 characters for 876 queries) are in the drill-down pages, read when opened. The CPU time fell by a third:
the report's two figures are drawn once with fixed margins (no constrained layout) and the win/loss panels are one
path per sign instead of a bar per query; scipy gets the resamples in batches. Under that load the wall time is
about 3x the CPU time; on an idle machine it is about the CPU time. Of the CPU time in process (about 3.9 s):
imports 1.2 s (scipy.stats, matplotlib, jinja2), the paired tests 0.8 s, the drill-down 0.7 s (reading A's and B's
runs strictly), the two plots 0.7 s, rendering 0.3 s. The corpora here are small (3,000 documents per dataset); the
report reads the corpus of each dataset it shows, so R2MED's real corpora (29k to 176k documents each) add the time
of reading them.

Measured 2026-12-06 again, idle (load average ~1), best of 3, after two changes (the page and its drill-down pages
the same to the byte, but for their own file name): **3.72 s wall** (5.34 s CPU), against 5.30 s wall (5.57 s CPU)
for the tree before them in the same benchmark run (both byte-compiled). (1) The paired tests (scipy.stats' import, ~1.1 s, and 9 tests of 10,000
resamples, ~0.8 s) run in a forked worker (``r2med.reporting.stats.PendingTests``) while the report reads the
datasets and runs and draws the leaderboard; the main process waits ~0.3 s for them. (2) A TREC run in the plain
form (printable-ASCII ids, decimal scores: every run r2med writes) is read in one pass after one regular-expression
pass over the file that removes its plain lines (``r2med.store.runs._read_plain_trec``), any other file line by line
as before: the 16 runs of the drill-down 0.9 -> 0.35 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

#: R2MED's datasets and their query counts (876 in all)
QUERIES = {"Biology": 103, "Bioinformatics": 77, "Medical-Sciences": 88, "MedXpertQA-Exam": 97, "MedQA-Diag": 118,
           "PMC-Treatment": 150, "PMC-Clinical": 114, "IIYi-Clinical": 129}
N_DOCS, DOC_WORDS, QUERY_WORDS, TOP_K = 3_000, 155, 60, 100
SYSTEMS = ("bm25", "contriever", "medcpt", "instructor-l", "bmr-2b", "nv", "e5", "sfr", "gte-qwen", "bge")


def _texts(rng, vocabulary, n: int, mean: int) -> list[str]:
    lengths = rng.normal(mean, mean * 0.3, size=n).clip(5, None).astype(int)
    flat = rng.choice(vocabulary, size=int(lengths.sum()))
    out, start = [], 0
    for length in lengths:
        out.append(" ".join(flat[start:start + length]))
        start += length
    return out


def write_datasets(root: Path, rng) -> dict[str, Path]:
    """Eight dataset directories (corpus.jsonl, query.jsonl, qrels.jsonl) under ``root/data``."""
    import json

    import numpy as np

    syllables = ["ca", "re", "mo", "ti", "lu", "pha", "gen", "ox", "ine", "ase", "cyt", "neu", "ro", "path", "ic"]
    vocabulary = np.array(sorted({"".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(4000)}))
    folders = {}
    for dataset, n_queries in QUERIES.items():
        folder = root / "data" / dataset
        folders[dataset] = folder
        if (folder / "qrels.jsonl").is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "corpus.jsonl").open("w", encoding="utf-8") as out:
            for i, text in enumerate(_texts(rng, vocabulary, N_DOCS, DOC_WORDS)):
                out.write(json.dumps({"id": f"doc{i}", "text": text}) + "\n")
        with (folder / "query.jsonl").open("w", encoding="utf-8") as out:
            for i, text in enumerate(_texts(rng, vocabulary, n_queries, QUERY_WORDS)):
                out.write(json.dumps({"id": f"q{i}", "text": text}) + "\n")
        with (folder / "qrels.jsonl").open("w", encoding="utf-8") as out:
            for i in range(n_queries):
                for d in rng.choice(N_DOCS, size=3, replace=False):
                    out.write(json.dumps({"q_id": f"q{i}", "p_id": f"doc{d}", "score": 1}) + "\n")
    return folders


def write_store(root: Path, *, seed: int = 7) -> Path:
    """The synthetic store under ``root/results`` (skipped when complete); returns that directory."""
    import numpy as np

    from r2med.datasets.local import load_dir
    from r2med.evaluation import evaluate
    from r2med.io.atomic import recorded_writes
    from r2med.manifest import build_manifest, write_manifest
    from r2med.store.results import SystemPath, write_result
    from r2med.types import Run

    out = root / "results"
    done = out / ".complete"
    if done.is_file():
        return out
    rng = np.random.default_rng(seed)
    folders = write_datasets(root, rng)
    for dataset, folder in folders.items():
        data = load_dir(folder, dataset)
        doc_ids = list(data.doc_ids)
        for n, system in enumerate(SYSTEMS):
            run: dict[str, dict[str, float]] = {}
            for qid in data.queries:
                relevant = [d for d, g in data.qrels.get(qid, {}).items() if g > 0]
                found = [d for d in relevant if rng.random() < 0.3 + 0.05 * n]
                picked = list(dict.fromkeys([*found, *rng.choice(doc_ids, size=TOP_K, replace=False)]))[:TOP_K]
                order = rng.permutation(len(picked))
                run[qid] = {picked[i]: round(float(30 - 0.25 * rank), 4) for rank, i in enumerate(order)}
            scores = evaluate(data.qrels, Run(run))
            where = SystemPath.base(system)
            with recorded_writes() as written:
                files = write_result(out, where, dataset, scores, Run(run), seconds=1.0)
            config = {"system": system, "dataset": dataset, "synthetic": seed}
            write_manifest(files.result, build_manifest(system=str(where), dataset=data, config=config,
                                                        timings={"total": 1.0},
                                                        files={p.name: d for p, d in written.items()}))
    done.write_text("ok\n")
    return out


def time_report(src: Path, results: Path, page: Path) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + system), the page's bytes and the bytes of every file written (the page and
    its drill-down pages, if any) of ``r2med report results -o page`` run with ``PYTHONPATH=src``."""
    import resource
    import shutil

    from r2med.reporting.report import drill_folder

    shutil.rmtree(drill_folder(page), ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "r2med.cli", "report", str(results), "-o", str(page), "-q"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    folder = drill_folder(page)
    pages = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
    return wall, cpu, page.stat().st_size, page.stat().st_size + pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/r2med-report-scale"), help="where the store is built")
    parser.add_argument("--src", type=Path, action="append", default=None,
                        help="source tree to time (repeatable; default: this checkout's src)")
    parser.add_argument("--repeat", type=int, default=1, help="reports written per source tree (the best is shown)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = write_store(args.work)
    print(f"store: {results} ({len(SYSTEMS)} systems x {len(QUERIES)} datasets, {sum(QUERIES.values())} queries; "
          f"built or found in {time.perf_counter() - started:.1f} s)")
    sources = args.src or [Path(__file__).resolve().parent.parent / "src"]
    for i, src in enumerate(sources):
        page = args.work / f"report-{i}.html"
        wall, cpu, size, total = min(time_report(src, results, page) for _ in range(args.repeat))
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{src}: page {size / 1e6:.2f} MB (with its drill-down pages {total / 1e6:.2f} MB) in {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU (load average {load}; {os.cpu_count()} CPUs) -> {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
