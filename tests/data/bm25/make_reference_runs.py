"""Regenerate the BM25 reference runs in this folder with the real reference pipelines.

Run it with an environment that has pyserini 0.22.1 (Java 17), gensim 4.x and pytrec_eval,
NOT with r2med's own environment (r2med does not depend on any of them):

    /path/to/refenv/bin/python tests/data/bm25/make_reference_runs.py [--shared ../shared]

For each collection it writes, gzip-compressed (mtime 0, so reruns are byte-identical):

* ``<name>.official.run.gz``: R2MED's official BM25, replicating ``retrieval_bm25`` of the
  authors' evaluation script line for line: Pyserini's default Lucene analyzer, gensim
  ``Dictionary`` + ``LuceneBM25Model(k1=0.9, b=0.4)`` + ``SparseMatrixSimilarity`` without
  normalisation, every row scored, ``results[qid][doc_id] = score`` over all rows, then
  ``sorted(..., reverse=True)[:100]``.
* ``<name>.lucene.run.gz``: Pyserini 0.22.1: ``JsonCollection`` indexed with the default
  generator and analyzer on one thread, ``LuceneSearcher.set_bm25(0.9, 0.4)``, top 100
  (for ``scifact_edge``: ``remove_dups=True`` over the top 1000, cut to 100). See
  ``lucene_runs`` for why it calls the Java classes through ``pyserini.pyclass``.

Runs are TREC lines ``qid Q0 docid rank score tag`` with scores printed ``%.6f`` (Pyserini's
scores are already rounded to 4 decimals by Anserini's ScoreTiesAdjusterReranker).

Collections: ``cacm`` and ``nfcorpus`` from ``<shared>/data``; ``scifact_edge``, built from
``<shared>/data/scifact`` by the recipe this script writes to ``scifact_edge.json.gz`` (repeated ids with other or
the same text, empty and all-stop-word documents, an empty query, a query of unknown words);
and ``toy.json``, the 3-document example of ``tests/retrievers/bm25/test_bm25_scoring.py`` scored
by both reference implementations. ``figures.json`` holds nDCG@10 and R@100 of every run
(pytrec_eval on the runs as written, averaged over the queries it evaluates, rounded to 5
decimals).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_collection(directory: Path):
    corpus = read_jsonl(directory / "corpus.jsonl")
    queries = read_jsonl(directory / "query.jsonl")
    qrels = defaultdict(dict)
    for row in read_jsonl(directory / "qrels.jsonl"):
        qrels[row["q_id"]][row["p_id"]] = int(row["score"])
    return (
        [d["id"] for d in corpus],
        [d["text"] for d in corpus],
        [q["id"] for q in queries],
        [q["text"] for q in queries],
        dict(qrels),
    )


def edge_recipe(shared: Path) -> dict:
    """A deterministic recipe: scifact's rows, plus repeated ids, empty documents and odd queries.

    Documents are ``[doc_id, source]`` with ``source`` a scifact corpus row or a literal text.
    """
    doc_ids, _, query_ids, _, qrels = load_collection(shared / "data" / "scifact")
    row_of = {d: i for i, d in enumerate(doc_ids)}
    queries = [q for q in query_ids if q in qrels][:100]
    relevant = []
    for q in queries:
        for d in sorted(qrels[q]):
            if d in row_of and d not in relevant:
                relevant.append(d)
    same_text, other_text, empty_again = relevant[0:40:2], relevant[1:40:2], relevant[40:43]
    docs: list[list] = [[d, i] for i, d in enumerate(doc_ids)]
    docs.insert(10, ["edge-empty-1", ""])
    docs.insert(2000, ["edge-stop-1", "The of and a to."])
    docs.insert(3000, ["edge-empty-2", "   "])
    for d in same_text:  # exact copies, later in the corpus
        docs.append([d, row_of[d]])
    for j, d in enumerate(other_text):  # same id, another document's text
        docs.insert(4000 + 7 * j, [d, row_of[relevant[60 + j]]])
    for d in empty_again:  # same id, empty text: last occurrence scores 0 officially
        docs.append([d, ""])
    docs.append(["edge-stop-2", "the"])
    recipe = {
        "documents": docs,
        "queries": queries,
        "extra_queries": [
            {"id": "edge-empty", "text": ""},
            {"id": "edge-unknown", "text": "zzxqv qqvzzx"},
            {"id": "edge-stop", "text": "the of and"},
            {
                "id": "edge-repeat",
                "text": "cancer cancer cancer cells cells cells cells cells tumour dna dna dna dna dna dna",
            },
        ],
    }
    # Pyserini's tokens of every literal text, so tests can use the recipe without an analyzer
    from pyserini import analysis

    analyzer = analysis.Analyzer(analysis.get_lucene_analyzer())
    literal = {src for _, src in docs if isinstance(src, str)}
    recipe["literal_tokens"] = {text: analyzer.analyze(text) for text in sorted(literal)}
    for query in recipe["extra_queries"]:
        query["tokens"] = analyzer.analyze(query["text"])
    return recipe


def edge_collection(shared: Path):
    """scifact with the edge cases of scifact_edge.json.gz spliced in."""
    recipe = json.loads(gzip.decompress((HERE / "scifact_edge.json.gz").read_bytes()))
    _, by_row, query_ids, queries, qrels = load_collection(shared / "data" / "scifact")
    new_ids, new_texts = [], []
    for doc_id, source in recipe["documents"]:
        new_ids.append(doc_id)
        new_texts.append(by_row[source] if isinstance(source, int) else source)
    keep = set(recipe["queries"])
    q_ids = [q for q in query_ids if q in keep] + [q["id"] for q in recipe["extra_queries"]]
    q_texts = [t for q, t in zip(query_ids, queries) if q in keep] + [q["text"] for q in recipe["extra_queries"]]
    return new_ids, new_texts, q_ids, q_texts, qrels


# ------------------------------------------------------------------ the two pipelines


def official_runs(doc_ids, documents, query_ids, queries, k=100):
    """R2MED's retrieval_bm25, verbatim apart from returning the ranked lists."""
    from gensim.corpora import Dictionary
    from gensim.models import LuceneBM25Model
    from gensim.similarities import SparseMatrixSimilarity
    from pyserini import analysis

    analyzer = analysis.Analyzer(analysis.get_lucene_analyzer())
    corpus = [analyzer.analyze(x) for x in documents]
    dictionary = Dictionary(corpus)
    model = LuceneBM25Model(dictionary=dictionary, k1=0.9, b=0.4)
    bm25_corpus = model[list(map(dictionary.doc2bow, corpus))]
    bm25_index = SparseMatrixSimilarity(
        bm25_corpus, num_docs=len(corpus), num_terms=len(dictionary), normalize_queries=False, normalize_documents=False
    )
    results = {}
    for query_id, query in zip(query_ids, queries):
        query = analyzer.analyze(query)
        bm25_query = model[dictionary.doc2bow(query)]
        similarities = bm25_index[bm25_query].tolist()
        results[str(query_id)] = {}
        for did, s in zip(doc_ids, similarities):
            results[str(query_id)][did] = s
        cur_scores = sorted(results[str(query_id)].items(), key=lambda x: x[1], reverse=True)[:k]
        results[str(query_id)] = {}
        for pair in cur_scores:
            results[str(query_id)][pair[0]] = pair[1]
    return {q: list(r.items()) for q, r in results.items()}


def lucene_runs(doc_ids, documents, query_ids, queries, k=100, remove_dups=False, depth=None):
    """Pyserini's LuceneSearcher, called at the Java class it wraps.

    ``pyserini.search`` imports pandas at module level for features not used here, so this
    goes through ``pyserini.pyclass`` to Anserini's ``SimpleSearcher`` (which Pyserini
    0.22.1's ``LuceneSearcher`` wraps) and repeats the wrapper's two lines of logic:
    ``object.search(q, k)`` and, with ``remove_dups``, keeping the first hit of each docid.
    """
    from pyserini.pyclass import autoclass

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "docs").mkdir()
        with open(tmp / "docs" / "docs.jsonl", "w", encoding="utf-8") as out:
            out.writelines(
                json.dumps({"id": doc_id, "contents": text}) + "\n" for doc_id, text in zip(doc_ids, documents)
            )
        # what `python -m pyserini.index.lucene` does, in a child process
        index_args = [
            "-collection",
            "JsonCollection",
            "-input",
            str(tmp / "docs"),
            "-index",
            str(tmp / "index"),
            "-generator",
            "DefaultLuceneDocumentGenerator",
            "-threads",
            "1",
        ]
        code = (
            "import sys; from pyserini.pyclass import autoclass; "
            "autoclass('io.anserini.index.IndexCollection').main(sys.argv[1:])"
        )
        subprocess.run(
            [sys.executable, "-c", code, *index_args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        searcher = autoclass("io.anserini.search.SimpleSearcher")(str(tmp / "index"))
        searcher.set_bm25(0.9, 0.4)
        runs = {}
        for qid, text in zip(query_ids, queries):
            hits, seen = [], set()
            for hit in searcher.search(text, depth or k):
                if hit.docid in seen:
                    continue
                hits.append((hit.docid, hit.score))
                if remove_dups:
                    seen.add(hit.docid)
            runs[str(qid)] = hits[:k]
        searcher.close()
    return runs


# ------------------------------------------------------------------ output


def write_gz(path: Path, text: str) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode("utf-8"))


def write_run(path: Path, runs, tag: str) -> None:
    lines = []
    for qid, ranked in runs.items():
        for rank, (docid, score) in enumerate(ranked, start=1):
            lines.append(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")
    write_gz(path, "".join(lines))


def figures(runs, qrels) -> dict:
    import pytrec_eval

    # evaluate the run as written (scores printed to 6 decimals), as trec_eval reads the file
    run = {q: {d: float(f"{s:.6f}") for d, s in ranked} for q, ranked in runs.items()}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    n = len(scores)
    return {
        "queries_evaluated": n,
        "ndcg_at_10": round(sum(s["ndcg_cut_10"] for s in scores.values()) / n, 5),
        "recall_at_100": round(sum(s["recall_100"] for s in scores.values()) / n, 5),
    }


def toy_reference() -> dict:
    """The unit tests' toy corpus scored by gensim and by Pyserini (texts analyse to themselves)."""
    toy = json.loads((HERE / "toy.json").read_text())["input"]
    docs = [" ".join(d) for d in toy["documents"]]
    queries = [" ".join(q) for q in toy["queries"]]
    qids = [str(i) for i in range(len(queries))]
    official = official_runs(toy["doc_ids"], docs, qids, queries, k=len(docs))
    lucene = lucene_runs(toy["doc_ids"], docs, qids, queries, k=len(docs))
    return {
        "r2med": [[[d, repr(s)] for d, s in official[q]] for q in qids],
        "lucene": [[[d, repr(s)] for d, s in lucene[q]] for q in qids],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=HERE.parents[2].parent / "shared")
    args = parser.parse_args()
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx4g")
    write_gz(HERE / "scifact_edge.json.gz", json.dumps(edge_recipe(args.shared)) + "\n")
    all_figures = {}
    collections = {
        "cacm": lambda: load_collection(args.shared / "data" / "cacm"),
        "nfcorpus": lambda: load_collection(args.shared / "data" / "nfcorpus"),
        "scifact_edge": lambda: edge_collection(args.shared),
    }
    for name, load in collections.items():
        doc_ids, texts, qids, queries, qrels = load()
        official = official_runs(doc_ids, texts, qids, queries)
        write_run(HERE / f"{name}.official.run.gz", official, "official")
        edge = name == "scifact_edge"
        lucene = lucene_runs(doc_ids, texts, qids, queries, remove_dups=edge, depth=1000 if edge else None)
        write_run(HERE / f"{name}.lucene.run.gz", lucene, "lucene")
        all_figures[name] = {"official": figures(official, qrels), "lucene": figures(lucene, qrels)}
        print(name, all_figures[name], flush=True)
    toy = json.loads((HERE / "toy.json").read_text())
    toy["reference"] = toy_reference()
    sections = ",\n".join(f" {json.dumps(key)}: {json.dumps(value)}" for key, value in toy.items())
    (HERE / "toy.json").write_text("{\n" + sections + "\n}\n")
    (HERE / "figures.json").write_text(json.dumps(all_figures, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
