"""BM25's C kernel (``csrc/bm25/``) against the Python and NumPy code it stands in for: the
Porter stemmer word for word, a corpus's vocabulary and counts, and every way its calls can be misused or stopped."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re

import numpy as np
import pytest

from conftest import REPO, shared_path
from r2med.retrievers.bm25 import kernel, parallel, porter
from r2med.retrievers.bm25.analyzer import ENGLISH_STOP_WORDS, EnglishAnalyzer
from r2med.retrievers.bm25.chunks import SEPARATOR_BYTES, NativeChunkTable
from r2med.retrievers.bm25.vocabulary import count_matrix

native = kernel.native
SEPARATORS = set(SEPARATOR_BYTES.decode("ascii"))
pytestmark = pytest.mark.skipif(native is None, reason="BM25's C kernel was not built (test_bm25_sparse says so)")

#: every suffix Porter's steps look at, and stems that make each step's conditions come out both ways
SUFFIXES = ["ational", "tional", "enci", "anci", "izer", "bli", "alli", "entli", "eli", "ousli", "ization", "ation",
            "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "logi", "icate", "ative",
            "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement",
            "ment", "ent", "ion", "sion", "tion", "ou", "ism", "ate", "iti", "ous", "ive", "ize", "s", "ss", "sses",
            "ies", "ed", "eed", "ing", "y", "e", "ll", "at", "bl", "iz"]
STEMS = ["", "a", "y", "yy", "by", "toy", "hop", "fil", "tr", "troubl", "relat", "gener", "sy", "cry", "agr", "plast",
         "fall", "happ", "x", "w", "oat", "st", "t", "3.5", "u.s", "o'neil"]


def corpus_words() -> set[str]:
    """The lower-cased ASCII words (letters, digits, ``.'-``) of SciFact and of the CACM and NFCorpus test data."""
    words: set[str] = set()
    pattern = re.compile(r"[a-z0-9'.\-]+")
    for line in shared_path("data", "scifact", "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        words.update(pattern.findall(json.loads(line)["text"].lower()))
    for path in sorted((REPO / "tests" / "data" / "analyzer").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                words.update(pattern.findall(line.lower()))
    return words


def test_the_c_porter_stemmer_is_porter_py_on_every_word():
    words = corpus_words()
    assert len(words) > 40_000
    words.update(s + a + b for s in STEMS for a in SUFFIXES for b in ["", *SUFFIXES])
    rng = random.Random(5)
    words.update("".join(rng.choice("aeiouybcdlnstrmgz") for _ in range(rng.randint(1, 14))) for _ in range(50_000))
    words.update(["x" * 300 + "ational", "y" * 400, "", "a", "ab", "ies", "eed", "ing"])
    differ = [(w, porter._stem_utf16(w), native.stem_ascii(w)) for w in words if porter._stem_utf16(w) !=
              native.stem_ascii(w)]
    assert differ == []
    assert [porter.stem(w) for w in ("caresses", "generalization", "gas", "3.5mg")] == ["caress", "gener", "ga", "3.5mg"]
    with pytest.raises(TypeError, match="expected an ASCII str"):
        native.stem_ascii("café")


HOSTILE = ["dogs", "Dog's", "U.S.A.", "3.5mg", "1,000", "e-mail", "a.b@c.org", "x\u202fy", "日本", "ｶﾀｶﾅ", "😀",
           "(patients),", "the", "IS", "\x00", "\x7f", "é", "o'neil's", "x" * 300, "TNF-α", "\ud800", "Ünïcödé", "ÿ",
           "naïve", "café's", "x" * 17, "y" * 16, "z" * 15, "β-blocker", "10\u00b0C", "ﬁne", "\u00a0", "\U0001d400b"]


def hostile_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    seps = [" ", "  ", "\t", "\n", "\u00a0", "\u3000", "", "\x1f", "\r\n"]
    return ["".join(rng.choice(HOSTILE) + rng.choice(seps) for _ in range(rng.randint(0, 40))) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_hostile_corpus_counts_as_one_pass_over_its_token_lists(seed, monkeypatch):
    texts = hostile_texts(seed, 3_000)
    vocab, counts = count_matrix(EnglishAnalyzer().analyze_many(texts))
    monkeypatch.setattr(parallel, "_SLICE", 250)
    analyzer = EnglishAnalyzer()
    analyzer.analyze_many(texts[:50])  # an analyzer with a history: its lifetime ids are not the corpus's
    analyzer.term_ids(texts[100:200])
    got_vocab, got = parallel.analyze_and_count(texts, analyzer, workers=2)
    assert isinstance(analyzer.chunk_table, NativeChunkTable)
    assert got_vocab == vocab
    for a, b in ((got.indptr, counts.indptr), (got.indices, counts.indices), (got.data, counts.data)):
        assert a.tolist() == b.tolist()
    again_vocab, again = parallel.analyze_and_count(texts, analyzer, workers=1)  # the same table, reused
    assert again_vocab == vocab and again.data.tolist() == counts.data.tolist()


def test_a_run_stopped_early_leaves_no_chunk_without_terms():
    table = EnglishAnalyzer().chunk_table
    batches = [["alpha beta"], ["gamma delta"], ["epsilon alpha"]]
    parts = table.scan_many(batches)
    next(parts)
    parts.close()  # the caller stops: later batches were looked up, their chunks will get no terms
    assert len(table) == 0
    assert [len(p.chunks_per_text) for p in table.scan_many(batches)] == [8, 8, 8]
    assert len(table) == 5


def test_an_analysis_that_fails_midway_empties_the_table_and_the_next_run_is_right(monkeypatch):
    texts = hostile_texts(3, 400)
    want_vocab, want = count_matrix(EnglishAnalyzer().analyze_many(texts))
    analyzer = EnglishAnalyzer()
    real = analyzer._chunk_term_ids
    calls = itertools.count()

    def flaky(chunk):
        if next(calls) == 150:
            raise RuntimeError("analysis failed")
        return real(chunk)

    analyzer.chunk_table._analyse = flaky
    monkeypatch.setattr(parallel, "_SLICE", 40)
    with pytest.raises(RuntimeError, match="analysis failed"):
        parallel.analyze_and_count(texts, analyzer)
    assert len(analyzer.chunk_table) == 0
    vocab, counts = parallel.analyze_and_count(texts, analyzer)
    assert vocab == want_vocab and counts.indices.tolist() == want.indices.tolist()
    assert counts.data.tolist() == want.data.tolist()


def test_a_text_that_is_not_a_string_is_named_and_nothing_is_kept():
    analyzer = EnglishAnalyzer()
    with pytest.raises(TypeError, match=r"texts\[1\] must be str, got int: 3"):
        parallel.analyze_and_count(["ok fine", 3, "fine"], analyzer)
    assert len(analyzer.chunk_table) == 0


def test_the_chunk_tables_calls_check_what_they_are_given():
    table = native.ChunkTable()
    with pytest.raises(TypeError, match="must be a sequence of str"):
        table.scan(7)
    with pytest.raises(TypeError, match="must be a sequence of str"):
        table.scan(text for text in ["a"])
    occurrences, per_text, new, words = table.scan(["b a b", "", "c"])
    assert new == ["b", "a", "c"] and words is None and np.frombuffer(occurrences, np.int32).tolist() == [0, 1, 0, 2]
    assert np.frombuffer(per_text, np.int64).tolist() == [3, 0, 1]
    with pytest.raises(ValueError, match="no terms"):
        table.expand(occurrences, per_text)  # the new chunks were not analysed yet
    with pytest.raises(ValueError, match="3 chunks wait for their terms, got terms for 4"):
        table.set_terms([(0,), (1,), (2,), (3,)])
    with pytest.raises(ValueError, match="term id -1 is negative"):
        table.set_terms([(0,), (-1,), ()])
    with pytest.raises(TypeError):
        table.set_terms([(0,), ("x",), ()])
    table.set_terms([(7,), (8, 9), ()])  # terms of the chunks b, a, c: c has none (a stop word)
    ids, lengths = table.expand(occurrences, per_text)
    assert np.frombuffer(ids, np.int64).tolist() == [7, 8, 9, 7] and np.frombuffer(lengths, np.int64).tolist() == [4, 0, 0]
    with pytest.raises(ValueError, match="adds up to 2, got 4 occurrences"):
        table.expand(occurrences, np.array([1, 0, 1], np.int64))
    with pytest.raises(ValueError, match="int32 items"):
        table.expand(b"\x00\x00\x00", per_text)
    order, first_text = table.first_terms([(occurrences, per_text)], 10)
    assert np.frombuffer(order, np.int64).tolist() == [7, 8, 9] and np.frombuffer(first_text, np.int64).tolist() == [0] * 3
    with pytest.raises(ValueError, match="holds term id 9, n_ids = 9"):
        table.first_terms([(occurrences, per_text)], 9)
    final = np.full(10, -1, np.int64)
    final[[7, 8, 9]] = [1, 2, 0]
    columns, counts, per_row = table.count(occurrences, per_text, final, 3)
    assert np.frombuffer(columns, np.int32).tolist() == [0, 1, 2] and np.frombuffer(counts, np.int32).tolist() == [1, 2, 1]
    assert np.frombuffer(per_row, np.int64).tolist() == [3, 0, 0]
    final[8] = -1
    with pytest.raises(ValueError, match="text 0 has term id 8, which has no final id"):
        table.count(occurrences, per_text, final, 3)
    assert len(table) == 3
    table.clear()
    assert len(table) == 0 and table.scan(["a"])[2] == ["a"]


@pytest.mark.parametrize("stopwords", [True, False])
@pytest.mark.parametrize("stemming", [True, False])
def test_plain_words_are_analysed_in_c_as_the_analyzer_does(stopwords, stemming):
    """Every chunk the kernel calls a plain word gets the analyzer's own terms for it; every other chunk is left to
    the analyzer."""
    chunks = set()
    for line in shared_path("data", "scifact", "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:1500]:
        chunks.update(json.loads(line)["text"].split())
    chunks.update(HOSTILE)
    chunks.update(["The", "THE", "it's", "(The)", "...", "-", "x" * 255, "x" * 256, "(" + "y" * 255 + ")", "a_b", "_a",
                   "a.", ".a", "'a'", "[1]", "1,000", "Is", "such", "THEIR", "into", "café", "b\x7fc", "ab\x00"])
    chunks = sorted(c for c in chunks if c and not any(ch in SEPARATORS for ch in c))
    analyzer = EnglishAnalyzer(stopwords=stopwords, stemming=stemming)
    table = native.ChunkTable(words=True, stop_words=sorted(ENGLISH_STOP_WORDS) if stopwords else (),
                              stemming=stemming)
    _, _, new, words = table.scan([" ".join(chunks)])
    assert new == chunks
    plain = 0
    for chunk, word in zip(new, words):
        if word is not None:
            plain += 1
            assert analyzer._chunk_terms(chunk) == ((word,) if word else ()), chunk
    assert plain > 0.6 * len(chunks)
    assert dict(zip(new, words))["x" * 256] is None and dict(zip(new, words))["café"] is None


def test_the_c_weights_are_numpys_bit_for_bit(monkeypatch):
    from r2med.retrievers.bm25.index import BM25Index

    texts = [json.loads(line)["text"] for line in shared_path("data", "scifact", "corpus.jsonl").read_text().splitlines()]
    token_lists = EnglishAnalyzer().analyze_many(texts) + [[], ["the"], ["x"] * 40]
    for k1, b in ((0.9, 0.4), (1.2, 0.75), (0.0, 1.0)):
        ours = BM25Index.build(token_lists, k1=k1, b=b, workers=2)._weights.data
        with monkeypatch.context() as hidden:
            hidden.setattr(kernel, "native", None)
            theirs = BM25Index.build(token_lists, k1=k1, b=b, workers=2)._weights.data
        assert ours.dtype == theirs.dtype == np.float32
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    with pytest.raises(ValueError, match=r"indices\[1\] = 9 is not a term of idf"):
        native.gensim_weights(np.array([0, 2], np.int32), np.array([0, 9], np.int32), np.array([1, 1], np.int32),
                              np.ones(1), np.ones(3), np.zeros(2, np.float32), 0, 1)
    with pytest.raises(ValueError, match="the shapes do not fit"):
        native.gensim_weights(np.array([0, 2], np.int32), np.array([0, 1], np.int32), np.array([1, 1], np.int32),
                              np.ones(1), np.ones(3), np.zeros(2, np.float32), 0, 2)


def test_scores_by_term_are_the_products_bit_for_bit(monkeypatch):
    from r2med.retrievers.bm25 import index as index_module
    from r2med.retrievers.bm25.index import BM25Index

    rows = [json.loads(line) for line in shared_path("data", "scifact", "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line)["text"] for line in shared_path("data", "scifact", "query.jsonl").read_text().splitlines()]
    analyzer = EnglishAnalyzer()
    index = BM25Index.build(analyzer.analyze_many([r["text"] for r in rows]), workers=2)
    query_lists = analyzer.analyze_many(queries[:120]) + [[], ["unknownword"]]
    ours = index.score_all(query_lists)  # the C kernel: by term over the transposed weights
    monkeypatch.setattr(index_module, "choose_kernel", lambda matrix, columns: "scipy")
    theirs = index.score_all(query_lists)
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape == (122, len(rows))
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert (ours[:-2].max(axis=1) > 0).all() and not ours[-2:].any()
    assert index.score_all([]).shape == (0, len(rows)) and index.search([], k=5) == []
    t = index._weights_by_term()
    assert t.shape == (index._weights.shape[1], index._weights.shape[0])
    assert np.array_equal(t.toarray(), index._weights.toarray().T)


def test_the_transpose_and_the_scores_by_term_check_their_arrays():
    indptr, indices, data = np.array([0, 2, 3], np.int32), np.array([0, 2, 1], np.int32), np.ones(3, np.float32)
    out_indptr, rows, out_data = np.empty(4, np.int64), np.empty(3, np.int32), np.empty(3, np.float32)
    native.csr_transpose(indptr, indices, data, out_indptr, rows, out_data)
    assert out_indptr.tolist() == [0, 1, 2, 3] and rows.tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match=r"indices\[1\] = 2 is not in \[0, 2\)"):
        native.csr_transpose(indptr, indices, data, np.empty(3, np.int64), rows, out_data)
    with pytest.raises(ValueError, match="out_indptr needs n_cols \\+ 1 int64 items"):
        native.csr_transpose(indptr, indices, data, np.empty(4, np.int32), rows, out_data)
    scores = np.zeros((2, 2), np.float32)
    out_indptr = out_indptr.astype(np.int32)  # row pointers and rows of one type
    with pytest.raises(ValueError, match=r"terms\[0\] = 3 is not a column"):
        native.score_columns(out_indptr, rows, out_data, np.array([0, 1, 1]), np.array([3]), np.ones(1, np.float32),
                             scores)
    with pytest.raises(ValueError, match=r"query_ptr\[1\] = 2 does not fit 1 query terms"):
        native.score_columns(out_indptr, rows, out_data, np.array([0, 2, 1]), np.array([0]), np.ones(1, np.float32),
                             scores)
    # terms 0 and 1 (rows 0 and 1) for the first query, term 2 (row 0) for the second
    native.score_columns(out_indptr, rows, out_data, np.array([0, 2, 3]), np.array([0, 1, 2]),
                         np.array([2, 3, 4], np.float32), scores)
    assert scores.tolist() == [[2.0, 3.0], [4.0, 0.0]]
    native.score_columns(out_indptr, rows, out_data, np.array([0]), np.array([], np.int64), np.ones(0, np.float32),
                         np.zeros((0, 2), np.float32))  # no queries
    with pytest.raises(ValueError, match="out must be n_queries x n_rows"):
        native.score_columns(out_indptr, rows, out_data, np.array([0, 0]), np.array([], np.int64),
                             np.ones(0, np.float32), np.zeros((2, 2), np.float32))


def test_counts_of_another_type_take_numpys_weights():
    """An index over float counts (a SciPy matrix a user built) is weighted as NumPy converts them, not truncated."""
    import scipy.sparse as sp

    from r2med.retrievers.bm25.index import BM25Index, BM25Params

    counts = sp.csr_matrix(np.array([[1.5, 2.0, 0.0], [0.0, 0.5, 3.0]]))
    index = BM25Index(params=BM25Params(variant="r2med"), vocabulary=["a", "b", "c"], counts=counts)
    as_ints = BM25Index(params=BM25Params(variant="r2med"), vocabulary=["a", "b", "c"],
                        counts=sp.csr_matrix(np.array([[1, 2, 0], [0, 0, 3]])))
    assert index._weights.data[0] != as_ints._weights.data[0]  # 1.5 is weighed as 1.5, not as 1


def test_a_count_matrix_with_rows_out_of_order_is_scored_the_same_every_way(monkeypatch):
    """A SciPy matrix whose rows hold their columns out of order (or repeated) is put in canonical form, so that
    the C kernel's scores by term and the products add a document's terms in one order (found by a review: 0.42276126
    against 0.4227613 before)."""
    import scipy.sparse as sp

    from r2med.retrievers.bm25 import index as index_module
    from r2med.retrievers.bm25.index import BM25Index, BM25Params

    counts = sp.csr_matrix(([3, 1, 2, 7, 5, 1, 1, 1], [5, 0, 3, 2, 4, 1, 0, 1], [0, 6, 8]), shape=(2, 6))
    vocabulary = [f"t{i}" for i in range(6)]
    queries = [["t5", "t0", "t3", "t2", "t4", "t1"], ["t1", "t0"]]
    index = BM25Index(params=BM25Params(variant="r2med"), vocabulary=vocabulary, counts=counts)
    ours = index.score_all(queries)
    monkeypatch.setattr(index_module, "choose_kernel", lambda matrix, columns: "scipy")
    theirs = index.score_all(queries)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert counts.indices.tolist() == [5, 0, 3, 2, 4, 1, 0, 1]  # the caller's matrix is left as it was
    assert index._counts.indices.tolist() == [0, 1, 2, 3, 4, 5, 0, 1]
    assert index._counts.data.tolist() == [1, 1, 7, 2, 5, 3, 1, 1] and index.doc_lengths.tolist() == [19, 2]
    repeated = sp.csr_matrix(([2, 1, 3], [1, 0, 1], [0, 3]), shape=(1, 2))  # column 1 twice: 2 + 3 of one term
    index = BM25Index(params=BM25Params(variant="r2med"), vocabulary=["a", "b"], counts=repeated)
    assert index._counts.indices.tolist() == [0, 1] and index._counts.data.tolist() == [1, 5]


def test_misuse_found_by_review_is_refused_not_a_crash():
    """Each case once crashed or misread memory (a hostile review, with ASan): now a clear error."""
    table = native.ChunkTable()
    occurrences, per_text, new, _ = table.scan(["a b"])

    def ids_that_clear_the_table():
        table.clear()  # Python code running inside set_terms
        yield 0

    with pytest.raises(ValueError, match="0 chunks wait for their terms, got terms for 2"):
        table.set_terms([ids_that_clear_the_table(), (1,)])
    occurrences, per_text, new, _ = table.scan(["a b"])
    table.set_terms([(0,), (1,)])
    with pytest.raises(ValueError, match="n_ids = 2305843009213693952 is not a number of term ids"):
        table.first_terms([(occurrences, per_text)], 2**61)
    assert np.frombuffer(table.first_terms([[occurrences, per_text]], 2)[0], np.int64).tolist() == [0, 1]  # a list
    with pytest.raises(TypeError, match="each part must be an \\(occurrences, chunks_per_text\\) pair"):
        table.first_terms([(occurrences,)], 2)
    with pytest.raises(ValueError, match="chunks_per_text must hold int64 items"):
        table.expand(occurrences, np.array([2], np.int32))  # an int32 array where int64 items are meant
    with pytest.raises(ValueError, match="occurrences must hold int32 items"):
        table.count(np.array([0, 1], np.int64), per_text, np.array([0, 1], np.int64), 2)
    with pytest.raises(ValueError, match="final must hold int64 items"):
        table.count(occurrences, per_text, np.array([0, 1], np.int32), 2)
    assert np.frombuffer(table.count(occurrences, per_text, np.array([1, 0], np.int64), 2)[0], np.int32).tolist() == [0, 1]
    with pytest.raises(TypeError, match="stop_words must be a sequence of str, not a str"):
        native.ChunkTable(words=True, stop_words="the")


def test_a_scan_started_while_another_gathers_its_texts_is_refused_or_waits_its_turn():
    """The caller's sequence may run Python code while a scan gathers its texts (here: it starts another scan on a
    thread); the table is marked as scanned only after that, so the two never walk it at once."""
    import threading
    import time

    table = native.ChunkTable()
    big = [" ".join(f"w{i}x{j}" for j in range(3000)) for i in range(300)]
    outcome = {}

    def other():
        try:
            outcome["other"] = len(table.scan(big)[2])
        except RuntimeError as exc:
            outcome["other"] = str(exc)

    class Texts(list):
        def __iter__(self):
            thread = threading.Thread(target=other)
            thread.start()
            time.sleep(0.05)  # the other scan is under way (300 x 3,000 new chunks)
            outcome["thread"] = thread
            return super().__iter__()

    try:
        mine = len(table.scan(Texts(["alpha beta"]))[2])
    except RuntimeError as exc:
        mine = str(exc)
    outcome["thread"].join()
    assert "a scan is running on another thread" in str(mine) or "a scan is running on another thread" in str(
        outcome["other"]) or (mine, outcome["other"]) in ((2, 900_000), (2, 0), (0, 900_000))
    handed = sum(n for n in (mine, outcome["other"]) if isinstance(n, int))
    assert len(table) == handed  # every chunk handed out once; the table holds exactly those
