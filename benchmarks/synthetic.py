"""A synthetic corpus shaped like R2MED's largest dataset (MedXpertQA-Exam: 61,379 documents of
~155 words; 118 queries of ~170 words, as MedQA-Diag), written in R2MED's layout.

Words are drawn from SciFact's own surface words with their corpus frequencies (Zipf-like), so the
analyzer meets real English, numbers and punctuation. Deterministic for a given seed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

N_DOCS, DOC_WORDS = 61_379, 155
N_QUERIES, QUERY_WORDS = 118, 170


def make_synthetic(source: Path, target: Path, *, seed: int = 13, n_docs: int = N_DOCS, n_queries: int = N_QUERIES) -> Path:
    """Write ``corpus.jsonl``, ``query.jsonl`` and ``qrels.jsonl`` under ``target`` (skipped when present)."""
    target = Path(target)
    if (target / "qrels.jsonl").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    with (Path(source) / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            counts.update(json.loads(line)["text"].split())
    words = np.array(list(counts))
    p = np.array(list(counts.values()), dtype=np.float64)
    p /= p.sum()
    rng = np.random.default_rng(seed)

    def texts(n: int, mean: int) -> list[str]:
        lengths = np.clip(rng.normal(mean, mean * 0.3, size=n).astype(int), 5, None)
        flat = rng.choice(words, size=int(lengths.sum()), p=p)
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        return [" ".join(flat[bounds[i]:bounds[i + 1]]) for i in range(n)]

    with (target / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts(n_docs, DOC_WORDS)):
            out.write(json.dumps({"id": f"doc{i}", "text": text}) + "\n")
    with (target / "query.jsonl").open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts(n_queries, QUERY_WORDS)):
            out.write(json.dumps({"id": f"q{i}", "text": text}) + "\n")
    with (target / "qrels.jsonl").open("w", encoding="utf-8") as out:
        for i in range(n_queries):
            for d in rng.choice(n_docs, size=3, replace=False):
                out.write(json.dumps({"q_id": f"q{i}", "p_id": f"doc{d}", "score": 1}) + "\n")
    return target
