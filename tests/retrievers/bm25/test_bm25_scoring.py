"""BM25 index: worked examples, the pure helpers, persistence, and parity with the reference runs.

Reference runs: ``../shared/data/scifact/{official,lucene}_bm25.run`` (made by the benchmark's
maintainers) and ``tests/data/bm25/*.run.gz`` (made by ``tests/data/bm25/make_reference_runs.py``
with gensim 4.4 and Pyserini 0.22.1). Parity is asserted exactly: the same document ids in the
same order for every query, and the same score strings as printed in the runs.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from r2med.errors import InvalidInputError, MissingResourceError, UsageError
from r2med.retrievers.bm25 import BM25Index, BM25Params, adjust_score_ties, top_k
from r2med.retrievers.bm25 import index as index_module
from r2med.retrievers.bm25.ranking import (
    DocIdTable,
    collapse_best,
    collapse_official,
    first_last_occurrences,
)
from r2med.retrievers.bm25.scoring import (
    LENGTH_TABLE,
    byte4_to_int,
    int_to_byte4,
    lucene_norm_inverse,
)
from r2med.retrievers.bm25.vocabulary import count_matrix, query_term_counts

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "bm25"
SHARED = ROOT.parent / "shared" / "data"

# --------------------------------------------------------------------------- helpers


def read_run(path: Path) -> dict[str, list[tuple[str, str]]]:
    """TREC run -> {qid: [(docid, score string), ...]} in file order."""
    opener = gzip.open if path.suffix == ".gz" else open
    run: dict[str, list[tuple[str, str]]] = defaultdict(list)
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            qid, _, docid, _, score, _ = line.split()
            run[qid].append((docid, score))
    return dict(run)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for row in read_jsonl(path):
        qrels[row["q_id"]][row["p_id"]] = int(row["score"])
    return dict(qrels)


def shown_scores(index: BM25Index, scores: np.ndarray) -> list[str]:
    """Scores as the reference runs print them (Pyserini's are tie-adjusted by Anserini);
    evaluation uses these too, as the reference figures were computed from the run files."""
    if index.params.variant == "lucene":
        scores = adjust_score_ties(scores)
    return [f"{s:.6f}" for s in scores.tolist()]


def compare(index: BM25Index, query_ids, query_tokens, reference, k: int = 100) -> dict:
    """Compare a search with a reference run; returns counts and the run as a dict."""
    identical_ids = identical_strings = 0
    max_diff = 0.0
    mismatched = []
    run = {}
    for qid, hits in zip(query_ids, index.search(query_tokens, k=k)):
        ids = [index.doc_ids[r] for r in hits.rows.tolist()]
        ref = reference.get(qid, [])
        if ids == [d for d, _ in ref]:
            identical_ids += 1
            if ref:
                max_diff = max(max_diff, max(abs(float(a) - float(b)) for a, (_, b) in zip(hits.scores, ref)))
        else:
            mismatched.append(qid)
        shown = shown_scores(index, hits.scores)
        identical_strings += shown == [s for _, s in ref]
        run[qid] = dict(zip(ids, map(float, shown)))
    return {
        "identical_ids": identical_ids,
        "identical_strings": identical_strings,
        "max_diff": max_diff,
        "mismatched": mismatched,
        "run": run,
    }


def evaluate(run, qrels) -> tuple[float, float]:
    import pytrec_eval

    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    n = len(scores)
    return (
        round(sum(s["ndcg_cut_10"] for s in scores.values()) / n, 5),
        round(sum(s["recall_100"] for s in scores.values()) / n, 5),
    )


# --------------------------------------------------------------------------- the toy corpus
#
# d0 = "1":  cat sat          (length 2)
# d1 = "9":  dog sat sat      (length 3)
# d2 = "10": cat dog fish     (length 3)
# N = 3, 8 tokens, avgdl = 8/3; df: cat 2, sat 2, dog 2, fish 1.
#
# idf (both variants; gensim writes ln(N+1) - ln(df+0.5), Lucene ln(1 + (N-df+0.5)/(df+0.5))):
#   df 2: ln(4/2.5) = ln 1.6   = 0.4700036
#   df 1: ln(4/1.5) = ln 8/3   = 0.9808293
# length norm k1 * (1 - b + b * len / avgdl), k1 = 0.9, b = 0.4:
#   len 2: 0.9 * (0.6 + 0.4 * 2 * 3/8) = 0.81        len 3: 0.9 * (0.6 + 0.45) = 0.945
#   (Lucene: lengths below 24 survive its one-byte norm exactly, so the same values)
# term weight idf * tf / (tf + norm):
#   d0 cat, d0 sat: 0.4700036 / 1.81  = 0.2596705
#   d1 sat (tf 2):  0.4700036 * 2 / 2.945 = 0.3191876
#   d1 dog, d2 cat, d2 dog: 0.4700036 / 1.945 = 0.2416471
#   d2 fish:        0.9808293 / 1.945 = 0.5042824

TOY_DOCS = [["cat", "sat"], ["dog", "sat", "sat"], ["cat", "dog", "fish"]]
TOY_IDS = ["1", "9", "10"]
TOY_QUERIES = [["cat", "sat"], ["cat", "cat", "fish", "zebra"], ["dog"]]

# r2med: the query is weighted by the same formula, with its own length (known tokens only).
#   q0 "cat sat": length 2 -> each term 0.2596705
#     d0 = 0.2596705 * 0.2596705 * 2 = 0.1348576
#     d1 = 0.2596705 * 0.3191876     = 0.0828836
#     d2 = 0.2596705 * 0.2416471     = 0.0627486
#   q1 "cat cat fish zebra": zebra is unknown, length 3 -> cat (tf 2) 0.3191876, fish 0.5042824
#     d0 = 0.3191876 * 0.2596705 = 0.0828836
#     d1 = 0                    (still ranked: the official top k includes zero scores)
#     d2 = 0.3191876 * 0.2416471 + 0.5042824 * 0.5042824 = 0.0771308 + 0.2543007 = 0.3314315
#   q2 "dog": length 1, norm 0.9 * (0.6 + 0.4 * 3/8) = 0.675 -> dog 0.4700036 / 1.675 = 0.2805992
#     d1 = d2 = 0.2805992 * 0.2416471 = 0.0678060: a tie, the earlier row ("9") first
R2MED_EXPECTED = [
    [("1", 0.1348576), ("9", 0.0828836), ("10", 0.0627486)],
    [("10", 0.3314315), ("1", 0.0828836), ("9", 0.0)],
    [("9", 0.0678060), ("10", 0.0678060), ("1", 0.0)],
]
# lucene: score = sum of boost * (term weight), boost = count in the query; matches only.
#   q0: d0 = 0.2596705 * 2 = 0.5193410, d1 = 0.3191876, d2 = 0.2416471
#   q1: cat has boost 2: d2 = 2 * 0.2416471 + 0.5042824 = 0.9875766, d0 = 2 * 0.2596705 = 0.5193410
#   q2: d1 = d2 = 0.2416471: a tie, broken by the id STRING: "10" < "9"
LUCENE_EXPECTED = [
    [("1", 0.5193410), ("9", 0.3191876), ("10", 0.2416471)],
    [("10", 0.9875766), ("1", 0.5193410)],
    [("10", 0.2416471), ("9", 0.2416471)],
]


@pytest.mark.parametrize(("variant", "expected"), [("r2med", R2MED_EXPECTED), ("lucene", LUCENE_EXPECTED)])
def test_toy_corpus_worked_values(variant, expected):
    index = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS, variant=variant)
    for hits, want in zip(index.search(TOY_QUERIES, k=10), expected):
        assert hits.scores.dtype == np.float32
        assert [TOY_IDS[r] for r in hits.rows] == [d for d, _ in want]
        assert hits.scores.tolist() == pytest.approx([w for _, w in want], abs=1e-6)
    run = index.search_run(["q0", "q1", "q2"], TOY_QUERIES, k=10)
    assert [list(run[q]) for q in ("q0", "q1", "q2")] == [[d for d, _ in want] for want in expected]
    if variant == "lucene":  # search_run reports Pyserini's tie-adjusted scores
        assert list(run["q2"].values()) == [0.24160000681877136, 0.24159900844097137]


def test_toy_corpus_matches_the_reference_implementations():
    """The same toy scored by gensim and Pyserini themselves (tests/data/bm25/toy.json)."""
    toy = json.loads((DATA / "toy.json").read_text())
    assert toy["input"] == {"documents": TOY_DOCS, "doc_ids": TOY_IDS, "queries": TOY_QUERIES}
    for variant in ("r2med", "lucene"):
        index = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS, variant=variant)
        for hits, ref in zip(index.search(TOY_QUERIES, k=10), toy["reference"][variant]):
            assert [index.doc_ids[r] for r in hits.rows] == [d for d, _ in ref]
            if variant == "r2med":  # gensim's float32 scores, bit for bit
                assert hits.scores.tolist() == [float(s) for _, s in ref]
            else:  # Pyserini's scores are tie-adjusted to 4 decimals
                assert adjust_score_ties(hits.scores).tolist() == [float(s) for _, s in ref]


def test_toy_r2med_scores_all_documents_and_lucene_only_matches():
    r2med = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS)
    lucene = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS, variant="lucene")
    assert r2med.search_run(["q"], [["zebra"]], k=2) == {"q": {"1": 0.0, "9": 0.0}}
    assert r2med.search_run(["q"], [[]], k=5) == {"q": {"1": 0.0, "9": 0.0, "10": 0.0}}
    assert lucene.search_run(["q"], [["zebra"]], k=2) == {"q": {}}
    assert lucene.search_run(["q"], [[]], k=2) == {"q": {}}


def test_score_all_agrees_with_search():
    index = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS)
    scores = index.score_all(TOY_QUERIES)
    assert scores.shape == (3, 3) and scores.dtype == np.float32
    for row, hits in zip(scores, index.search(TOY_QUERIES, k=3)):
        assert row[hits.rows].tolist() == hits.scores.tolist()


def test_k_larger_smaller_and_zero():
    index = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS)
    assert [len(h.rows) for h in index.search(TOY_QUERIES, k=100)] == [3, 3, 3]
    assert [h.rows.tolist() for h in index.search(TOY_QUERIES, k=1)] == [[0], [2], [1]]
    assert [len(h.rows) for h in index.search(TOY_QUERIES, k=0)] == [0, 0, 0]
    with pytest.raises(UsageError):
        index.search(TOY_QUERIES, k=-1)


def test_without_doc_ids_rows_are_named_by_number():
    index = BM25Index.build(TOY_DOCS, variant="lucene")
    assert list(index.search_run(["q"], [["dog"]])["q"]) == ["1", "2"]


# --------------------------------------------------------------------------- Lucene's norms

# SmallFloat.intToByte4 as computed by the Lucene 9 classes in Pyserini 0.22.1's jar
JAVA_INT_TO_BYTE4 = {
    0: 0,
    1: 1,
    23: 23,
    24: 24,
    25: 25,
    30: 30,
    39: 39,
    40: 40,
    41: 40,
    100: 57,
    155: 64,
    170: 65,
    1000: 87,
    4096: 103,
    10000: 113,
    65535: 135,
    100000: 140,
    200000: 148,
    123456789: 222,
    2**30: 247,
    2**31 - 1: 255,
}


def test_smallfloat_matches_lucene():
    lengths = np.array(list(JAVA_INT_TO_BYTE4), dtype=np.int64)
    assert int_to_byte4(lengths).tolist() == list(JAVA_INT_TO_BYTE4.values())
    # decoding gives the smallest length of each byte's bucket; lengths below 24 are exact
    codes = int_to_byte4(np.arange(5000))
    decoded = byte4_to_int(codes)
    assert (decoded <= np.arange(5000)).all() and (decoded[:24] == np.arange(24)).all()
    assert (int_to_byte4(decoded) == codes).all()
    assert (np.diff(codes.astype(int)) >= 0).all()
    assert LENGTH_TABLE.dtype == np.float32 and LENGTH_TABLE[57] == 96.0


def test_lossy_norm_makes_different_lengths_score_the_same():
    # lengths 40 and 41 share a norm byte (40), so Lucene cannot tell them apart; gensim can
    filler = [[f"w{i}" for i in range(n)] for n in (39, 40)]
    docs = [["x", *filler[0]], ["x", *filler[1]], ["y"]]
    lucene = BM25Index.build(docs, variant="lucene").score_all([["x"]])[0]
    r2med = BM25Index.build(docs).score_all([["x"]])[0]
    assert lucene[0] == lucene[1] > 0
    assert r2med[0] > r2med[1] > 0


def test_norm_cache_is_float32_and_decreasing():
    cache = lucene_norm_inverse(0.9, 0.4, np.float32(8 / 3))
    assert cache.dtype == np.float32 and cache.shape == (256,)
    assert cache[2] == pytest.approx(1 / 0.81) and (np.diff(cache) < 0).all()


# --------------------------------------------------------------------------- pure helpers


def test_vocabulary_ids_follow_gensim():
    # gensim: terms new to a document get the next ids in sorted order of their strings
    vocab, counts = count_matrix([["zeta", "alpha", "zeta"], ["beta", "alpha", "aardvark"], []])
    assert vocab == ["alpha", "zeta", "aardvark", "beta"]
    assert counts.toarray().tolist() == [[1, 2, 0, 0], [1, 0, 1, 1], [0, 0, 0, 0]]
    # each row's terms once, in increasing id order (the order the scores are summed in)
    assert (counts.indptr.tolist(), counts.indices.tolist(), counts.data.tolist()) == ([0, 2, 5, 5], [0, 1, 0, 2, 3],
                                                                                        [1, 2, 1, 1, 1])


def test_query_term_counts_drop_unknown_tokens():
    q, t, c, known = query_term_counts([["b", "zz", "b"], [], ["zz"], ["a"]], {"a": 0, "b": 1})
    assert (q.tolist(), t.tolist(), c.tolist(), known.tolist()) == ([0, 3], [1, 0], [2, 1], [2, 0, 0, 1])


def test_top_k_equals_a_full_stable_sort():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        scores = rng.integers(0, 5, n).astype(np.float32)  # many ties
        tie_rank = rng.permutation(n)
        k = int(rng.integers(1, n + 3))
        full = np.lexsort((tie_rank, -scores))[:k]
        assert top_k(scores, k, tie_rank=tie_rank).tolist() == full.tolist()
        stable = sorted(range(n), key=lambda i: scores[i], reverse=True)[:k]  # the official sort
        assert top_k(scores, k).tolist() == stable
        positive = [i for i in np.lexsort((tie_rank, -scores))[:k] if scores[i] > 0]
        assert top_k(scores, k, tie_rank=tie_rank, positive_only=True).tolist() == positive


def test_duplicate_ids_worked_example():
    # rows:   0    1    2    3    4
    ids = ["a", "b", "a", "c", "a"]
    scores = np.array([5.0, 3.0, 1.0, 0.0, 2.0], dtype=np.float32)
    first, last, group = first_last_occurrences(ids)
    assert (first.tolist(), last.tolist(), group.tolist()) == ([0, 1, 3], [4, 1, 3], [0, 1, 0, 2, 0])
    # Official: results[qid][doc] = score over all rows -> "a" keeps its first place (row 0)
    # but the score of its last row (row 4: 2.0). Sorted stably: b 3.0, a 2.0, c 0.0.
    official = collapse_official(scores, last)
    assert official.tolist() == [2.0, 3.0, 0.0]
    assert [["a", "b", "c"][i] for i in top_k(official, 3)] == ["b", "a", "c"]
    # Pyserini remove_dups: each id's best row -> a 5.0, b 3.0, c 0.0
    assert collapse_best(scores, group, 3).tolist() == [5.0, 3.0, 0.0]


def test_duplicate_ids_through_the_index():
    # rows:     0      1           2      3    4
    docs = [["x"], ["x", "y"], ["y"], [], ["x", "x"]]
    ids = ["a", "b", "a", "c", "a"]
    r2med = BM25Index.build(docs, doc_ids=ids)
    # query x: rows 0, 1, 4 match; "a" takes row 4's score (its last row; tf 2 beats b's tf 1)
    rows = r2med.score_all([["x"]])[0]
    assert rows[4] > rows[1] > 0 and rows[2] == rows[3] == 0
    run = r2med.search_run(["q"], [["x"]])["q"]
    assert list(run.items()) == [("a", float(rows[4])), ("b", float(rows[1])), ("c", 0.0)]
    # query y: rows 1, 2 match, but "a" takes row 4's score, 0: "b" first, then "a" (first
    # seen at row 0) before "c" (row 3) among the zeros; hits name the first row of each id
    hits = r2med.search([["y"]])[0]
    assert hits.rows.tolist() == [1, 0, 3]
    assert hits.scores[0] > 0 and hits.scores[1:].tolist() == [0.0, 0.0]
    # lucene: each id's best row, matching rows only: "a" is row 2 (length 1 beats b's length 2)
    lucene = BM25Index.build(docs, doc_ids=ids, variant="lucene")
    lrows = lucene.score_all([["y"]])[0]
    assert lrows[2] > lrows[1] > 0
    hits = lucene.search([["y"]])[0]
    assert hits.rows.tolist() == [0, 1] and hits.scores.tolist() == [lrows[2], lrows[1]]
    assert list(lucene.search_run(["q"], [["y"]])["q"]) == ["a", "b"]


def test_doc_id_table_orders_ids_as_lucene_does():
    table = DocIdTable.from_ids(["9", "10", "9", "b", "A", "é"])
    # code point order == UTF-8 byte order (Lucene's BytesRef): "10" < "9" < "A" < "b" < "é"
    assert table.id_rank.tolist() == [1, 0, 3, 2, 4]
    assert table.has_duplicates and table.n_unique == 5


def test_adjust_score_ties_reproduces_anserini():
    # 7.12555f is 7.1255497...; Anserini rounds (double) x * 1e4 = 71255.497..., so 7.1255
    scores = np.array([7.1684475, 7.12555, 7.12555, 7.1255, 7.06759], dtype=np.float32)
    assert [f"{s:.6f}" for s in adjust_score_ties(scores).tolist()] == [
        "7.168400",
        "7.125500",
        "7.125499",
        "7.125498",
        "7.067600",
    ]
    assert adjust_score_ties(np.array([], dtype=np.float32)).shape == (0,)


# --------------------------------------------------------------------------- parameters, persistence


def test_params_validate():
    assert BM25Params() == BM25Params(variant="r2med", k1=0.9, b=0.4)
    with pytest.raises(UsageError, match="did you mean 'lucene'"):
        BM25Params(variant="Lucene")
    for bad in ({"k1": -1.0}, {"k1": math.inf}, {"b": 1.5}, {"b": -0.1}):
        with pytest.raises(UsageError):
            BM25Params(**bad)
    with pytest.raises(InvalidInputError):
        BM25Index.build([])
    with pytest.raises(InvalidInputError):
        BM25Index.build(TOY_DOCS, doc_ids=["only-one"])


def test_parameters_change_scores():
    base = BM25Index.build(TOY_DOCS).score_all(TOY_QUERIES)
    other = BM25Index.build(TOY_DOCS, k1=1.2, b=0.75).score_all(TOY_QUERIES)
    assert not np.array_equal(base, other)
    # b = 0: no length normalisation; d1 and d2 both hold "dog" once
    flat = BM25Index.build(TOY_DOCS, b=0.0, variant="lucene").score_all([["sat"]])[0]
    assert flat[1] > flat[0]  # tf 2 beats tf 1 whatever the lengths


@pytest.mark.parametrize("variant", ["r2med", "lucene"])
def test_save_and_load_round_trip(tmp_path, variant):
    index = BM25Index.build(TOY_DOCS, doc_ids=TOY_IDS, variant=variant, k1=1.1, b=0.3)
    index.save(tmp_path / "idx")
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["index.json", "index.npz"]
    meta = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert meta["format_version"] == 1 and meta["params"] == {"variant": variant, "k1": 1.1, "b": 0.3}
    loaded = BM25Index.load(tmp_path / "idx")
    assert loaded.params == index.params and loaded.vocabulary == index.vocabulary
    for a, b in zip(index.search(TOY_QUERIES), loaded.search(TOY_QUERIES)):
        assert a.rows.tolist() == b.rows.tolist() and a.scores.tolist() == b.scores.tolist()
    # the arrays load without pickle
    with np.load(tmp_path / "idx" / "index.npz", allow_pickle=False) as data:
        assert set(data.files) == {"indptr", "indices", "counts", "shape"}


def test_load_reports_missing_and_foreign_indexes(tmp_path):
    with pytest.raises(MissingResourceError, match="no BM25 index"):
        BM25Index.load(tmp_path / "nothing")
    BM25Index.build(TOY_DOCS).save(tmp_path / "idx")
    meta_path = tmp_path / "idx" / "index.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 99
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InvalidInputError, match="version 99"):
        BM25Index.load(tmp_path / "idx")


# --------------------------------------------------------------------------- scifact parity (reference tokens)


@pytest.fixture(scope="module")
def scifact():
    directory = SHARED / "scifact"
    if not (directory / "lucene_tokens.jsonl").is_file():
        pytest.skip(f"shared scifact data not found at {directory}")
    docs, doc_ids, queries, query_ids = [], [], [], []
    for row in read_jsonl(directory / "lucene_tokens.jsonl"):
        if row["kind"] == "doc":
            doc_ids.append(row["id"])
            docs.append(row["tokens"])
        else:
            query_ids.append(row["id"])
            queries.append(row["tokens"])
    return {
        "docs": docs,
        "doc_ids": doc_ids,
        "queries": queries,
        "query_ids": query_ids,
        "qrels": read_qrels(directory / "qrels.jsonl"),
        "dir": directory,
    }


@pytest.fixture(params=["scipy", "numpy"])
def kernel(request, monkeypatch):
    """The sparse x dense product by SciPy's kernel, then by NumPy's (``sparse.product``): both match the references."""
    used = []

    def choose(matrix, columns):
        used.append(request.param)
        return request.param

    monkeypatch.setattr(index_module, "choose_kernel", choose)
    yield used


@pytest.mark.parametrize(
    ("variant", "run_file", "ndcg", "recall"),
    [("r2med", "official_bm25.run", 0.67075, 0.93), ("lucene", "lucene_bm25.run", 0.67891, 0.92533)],
)
def test_scifact_parity(scifact, variant, run_file, ndcg, recall, kernel):
    index = BM25Index.build(scifact["docs"], doc_ids=scifact["doc_ids"], variant=variant)
    result = compare(index, scifact["query_ids"], scifact["queries"], read_run(scifact["dir"] / run_file))
    n = len(scifact["query_ids"])
    assert result["mismatched"] == []
    assert result["identical_ids"] == n == 300
    assert result["identical_strings"] == n
    assert result["max_diff"] <= 1e-4
    assert evaluate(result["run"], scifact["qrels"]) == (ndcg, recall)
    assert kernel  # the product went through the kernel of this case


def test_search_chunking_and_threads_do_not_change_results(scifact, monkeypatch):
    queries = scifact["queries"][40:80]
    assert any(max(Counter(q).values()) == 3 for q in queries)  # a boost that is no power of two (Lucene)
    for variant in ("r2med", "lucene"):
        index = BM25Index.build(scifact["docs"], doc_ids=scifact["doc_ids"], variant=variant, workers=1)
        threaded = BM25Index.build(scifact["docs"], doc_ids=scifact["doc_ids"], variant=variant, workers=3)
        weights = ("_weights",) if variant == "r2med" else ("_x", "_unit")
        for name in weights:  # weighted in 3 row ranges on 3 threads: the same bits
            assert np.array_equal(getattr(index, name).data, getattr(threaded, name).data)
        whole = index.search(queries, k=50)
        on_threads = threaded.search(queries, k=50)  # one chunk of queries per thread
        monkeypatch.setattr(index_module, "_MAX_BLOCK_CELLS", 3 * len(index.vocabulary))  # 3 queries a chunk
        chunked = index.search(queries, k=50)
        chunked_threads = threaded.search(queries, k=50)
        monkeypatch.undo()
        assert len(whole) == len(on_threads) == len(chunked) == len(chunked_threads) == 40
        for a, *others in zip(whole, on_threads, chunked, chunked_threads):
            for b in others:
                assert a.rows.tolist() == b.rows.tolist() and a.scores.tolist() == b.scores.tolist()


def test_scifact_edge_cases_parity(scifact, kernel):
    """Repeated ids (same and other text, empty), empty and stop-word-only documents,
    an empty query, a query of unknown words, repeated query terms (boosts 3, 5, 6)."""
    recipe = json.loads(gzip.decompress((DATA / "scifact_edge.json.gz").read_bytes()))
    docs = [
        scifact["docs"][src] if isinstance(src, int) else recipe["literal_tokens"][src]
        for _, src in recipe["documents"]
    ]
    doc_ids = [d for d, _ in recipe["documents"]]
    by_id = dict(zip(scifact["query_ids"], scifact["queries"]))
    query_ids = recipe["queries"] + [q["id"] for q in recipe["extra_queries"]]
    queries = [by_id[q] for q in recipe["queries"]] + [q["tokens"] for q in recipe["extra_queries"]]
    figures = json.loads((DATA / "figures.json").read_text())["scifact_edge"]
    for variant, tag in (("r2med", "official"), ("lucene", "lucene")):
        index = BM25Index.build(docs, doc_ids=doc_ids, variant=variant)
        reference = read_run(DATA / f"scifact_edge.{tag}.run.gz")
        result = compare(index, query_ids, queries, reference)
        assert result["mismatched"] == [], variant
        assert result["identical_strings"] == len(query_ids) == 104, variant
        assert evaluate(result["run"], scifact["qrels"]) == (
            figures[tag]["ndcg_at_10"],
            figures[tag]["recall_at_100"],
        )
    assert kernel


# --------------------------------------------------------------------------- cacm, nfcorpus (need the analyzer)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cacm", "nfcorpus"])
@pytest.mark.parametrize(("variant", "tag"), [("r2med", "official"), ("lucene", "lucene")])
def test_reference_runs_with_the_analyzer(name, variant, tag, kernel):
    analyzer = pytest.importorskip("r2med.retrievers.bm25.analyzer")
    directory = SHARED / name
    if not (directory / "corpus.jsonl").is_file():
        pytest.skip(f"shared {name} data not found at {directory}")
    corpus = read_jsonl(directory / "corpus.jsonl")
    queries = read_jsonl(directory / "query.jsonl")
    if hasattr(analyzer, "EnglishAnalyzer"):
        analyze_many = analyzer.EnglishAnalyzer().analyze_many
    else:
        analyze_many = lambda texts: [analyzer.analyze(t) for t in texts]
    index = BM25Index.build(
        analyze_many([d["text"] for d in corpus]), doc_ids=[d["id"] for d in corpus], variant=variant
    )
    query_ids = [q["id"] for q in queries]
    result = compare(
        index, query_ids, analyze_many([q["text"] for q in queries]), read_run(DATA / f"{name}.{tag}.run.gz")
    )
    assert result["mismatched"] == []
    assert result["identical_strings"] == len(query_ids)
    figures = json.loads((DATA / "figures.json").read_text())[name][tag]
    assert evaluate(result["run"], read_qrels(directory / "qrels.jsonl")) == (
        figures["ndcg_at_10"],
        figures["recall_at_100"],
    )
    assert kernel


def test_corpus_without_any_token():
    r2med = BM25Index.build([[], []], doc_ids=["a", "b"])
    lucene = BM25Index.build([[], []], doc_ids=["a", "b"], variant="lucene")
    assert r2med.search_run(["q"], [["x"]]) == {"q": {"a": 0.0, "b": 0.0}}  # gensim: all zeros
    assert lucene.search_run(["q"], [["x"]]) == {"q": {}}
    assert r2med.search([]) == [] and lucene.search_run([], []) == {}
