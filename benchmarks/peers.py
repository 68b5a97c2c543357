"""The peers r2med's BM25 is measured against, each run end to end from the dataset files:
load, analyse, index, search every query, write a TREC run (top 100).

- ``official``: R2MED's own pipeline (src/eval_bench_BM25.py): Pyserini's Lucene analyzer, gensim
  Dictionary + LuceneBM25Model(k1=0.9, b=0.4) + SparseMatrixSimilarity, one query at a time, a dict of
  every document's score sorted per query. Needs ``pip install --no-deps pyserini==0.22.1 pyjnius gensim``
  and Java 17.
- ``bm25s``: bm25s with its English stop words and PyStemmer's English stemmer, method "lucene",
  k1=0.9, b=0.4 (the closest configuration it offers; its analyzer is not Lucene's).
"""

from __future__ import annotations

import json
from pathlib import Path


def read_dataset(folder: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    doc_ids, docs, query_ids, queries = [], [], [], []
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            doc_ids.append(row["id"])
            docs.append(row["text"])
    with (folder / "query.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            query_ids.append(row["id"])
            queries.append(row["text"])
    return doc_ids, docs, query_ids, queries


def write_run(results: dict[str, list[tuple[str, float]]], path: Path, tag: str) -> None:
    with path.open("w", encoding="utf-8") as out:
        for qid, pairs in results.items():
            for rank, (did, score) in enumerate(pairs, start=1):
                out.write(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n")


def official_available() -> str | None:
    """None when the official pipeline's packages are installed, else why not.

    Only looks the packages up: importing Pyserini starts a JVM, which must wait until r2med has run
    (r2med does not fork worker processes under a JVM, so it would run on one core).
    """
    import importlib.util
    import shutil

    missing = [name for name in ("pyserini", "jnius", "gensim") if importlib.util.find_spec(name) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (pip install --no-deps pyserini==0.22.1 pyjnius gensim)"
    if shutil.which("java") is None:
        return "no java on PATH (Pyserini 0.22.1 needs Java 11+)"
    return None


def run_official(folder: Path, out: Path, k: int = 100) -> None:
    from gensim.corpora import Dictionary
    from gensim.models import LuceneBM25Model
    from gensim.similarities import SparseMatrixSimilarity
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    doc_ids, docs, query_ids, queries = read_dataset(folder)
    analyzer = Analyzer(get_lucene_analyzer())
    corpus = [analyzer.analyze(text) for text in docs]
    dictionary = Dictionary(corpus)
    model = LuceneBM25Model(dictionary=dictionary, k1=0.9, b=0.4)
    bm25_corpus = model[list(map(dictionary.doc2bow, corpus))]
    index = SparseMatrixSimilarity(bm25_corpus, num_docs=len(corpus), num_terms=len(dictionary),
                                   normalize_queries=False, normalize_documents=False)
    results = {}
    for qid, text in zip(query_ids, queries):
        similarities = index[model[dictionary.doc2bow(analyzer.analyze(text))]].tolist()
        scored = {}
        for did, score in zip(doc_ids, similarities):
            scored[did] = score
        results[qid] = sorted(scored.items(), key=lambda item: item[1], reverse=True)[:k]
    write_run(results, out, "official")


def bm25s_available() -> str | None:
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run_bm25s(folder: Path, out: Path, k: int = 100) -> None:
    import bm25s
    import Stemmer

    doc_ids, docs, query_ids, queries = read_dataset(folder)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    retriever.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    rows, scores = retriever.retrieve(tokens, k=min(k, len(docs)), show_progress=False)
    results = {qid: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i])] for i, qid in enumerate(query_ids)}
    write_run(results, out, "bm25s")
