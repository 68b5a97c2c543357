"""Cut a dataset in R2MED's layout down to its first judged queries (the ``sf6`` of docs/expand.md and rerank.md).

    python tools/make_subset.py SOURCE_DIR OUT_DIR [--queries 6] [--docs all|judged|N]

Keeps the first ``--queries`` judged queries (qrels order), their judgements, and the corpus: all of it
(default), only the judged documents, or the judged ones and the first N others. Lines are copied byte for byte,
in file order. ``sf6`` is ``python tools/make_subset.py ../shared/data/scifact sf6``: six SciFact queries over
the full corpus (5,183 documents).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _rows(path: Path) -> list[tuple[str, dict]]:
    """``(line, record)`` of each non-empty line."""
    return [(line, json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if line.strip()]


def make_subset(source: Path, out: Path, *, queries: int = 6, docs: str = "all") -> dict[str, int]:
    """Write the subset to ``out`` (which must not exist yet); returns the counts written."""
    if out.exists():
        raise SystemExit(f"make_subset: {out} exists; remove it or choose another folder")
    qrels = _rows(source / "qrels.jsonl")
    judged = list(dict.fromkeys(str(r["q_id"]) for _, r in qrels))[:queries]
    keep_q = [line for line, q in _rows(source / "query.jsonl") if str(q["id"]) in judged]
    keep_r = [line for line, r in qrels if str(r["q_id"]) in judged]
    relevant = {str(r["p_id"]) for _, r in qrels if str(r["q_id"]) in judged}
    corpus = _rows(source / "corpus.jsonl")
    if docs == "all":
        keep_d = [line for line, _ in corpus]
    else:
        others = 0 if docs == "judged" else int(docs)
        rest = [line for line, d in corpus if str(d["id"]) not in relevant][:others]
        keep_d = [line for line, d in corpus if str(d["id"]) in relevant or line in rest]
    out.mkdir(parents=True)
    for name, lines in (("query.jsonl", keep_q), ("qrels.jsonl", keep_r), ("corpus.jsonl", keep_d)):
        (out / name).write_text("".join(lines), encoding="utf-8")
    return {"queries": len(keep_q), "judgements": len(keep_r), "documents": len(keep_d)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a dataset directory (query.jsonl, qrels.jsonl, corpus.jsonl)")
    parser.add_argument("out", type=Path, help="the new dataset directory (its name is the dataset's)")
    parser.add_argument("--queries", type=int, default=6, help="judged queries kept, in qrels order (default 6)")
    parser.add_argument("--docs", default="all", help="all (default), judged, or N: the judged and N others")
    args = parser.parse_args(argv)
    counts = make_subset(args.source, args.out, queries=args.queries, docs=args.docs)
    print(f"{args.out}: " + ", ".join(f"{n} {what}" for what, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
