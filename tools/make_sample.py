"""Build the SciFact sample that r2med ships (``src/r2med/data/sample/scifact-sample/``) from ``../shared``.

    python tools/make_sample.py [SCIFACT_DIR] [OUT_DIR]

The sample is small enough to ship inside the package (about 1 MB) and real enough to print a non-zero
table on the first offline run: the first 50 queries of SciFact's test split (file order), every document
they judge relevant (so every judgement resolves), the top 10 documents of each query in the official BM25
run (``official_bm25.run``: hard negatives), and 150 more documents drawn with ``random.Random(0)``. Lines
are copied byte for byte, in the order of the original files. ``tests/datasets/test_sample.py`` checks
that the shipped files are exactly what this script builds.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

QUERIES = 50
TOP = 10
EXTRA = 150
SEED = 0

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent.parent / "shared" / "data" / "scifact"
DEFAULT_OUT = HERE.parent / "src" / "r2med" / "data" / "sample" / "scifact-sample"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def build(source: Path) -> dict[str, str]:
    """The three files of the sample (name -> text), built from the SciFact directory ``source``."""
    query_lines = _lines(source / "query.jsonl")[:QUERIES]
    qids = {json.loads(line)["id"] for line in query_lines}
    qrels_lines = [line for line in _lines(source / "qrels.jsonl") if json.loads(line)["q_id"] in qids]
    keep = {json.loads(line)["p_id"] for line in qrels_lines}
    for line in _lines(source / "official_bm25.run"):
        qid, _, docid, rank, *_ = line.split()
        if qid in qids and int(rank) <= TOP:
            keep.add(docid)
    corpus_lines = _lines(source / "corpus.jsonl")
    ids = [json.loads(line)["id"] for line in corpus_lines]
    rest = sorted(set(ids) - keep)
    keep.update(random.Random(SEED).sample(rest, EXTRA))
    return {
        "corpus.jsonl": "".join(line for line, did in zip(corpus_lines, ids) if did in keep),
        "query.jsonl": "".join(query_lines),
        "qrels.jsonl": "".join(qrels_lines),
    }


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else DEFAULT_SOURCE
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, text in build(source).items():
        (out / name).write_text(text, encoding="utf-8")
        print(f"{out / name}: {text.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
