"""The pure-Python analyzer against Pyserini 0.22.1's ``Analyzer(get_lucene_analyzer())``.

Reference tokens come from the real Java analyzer: ``../shared/data/scifact/lucene_tokens.jsonl``
(made by the benchmark's maintainers) and ``tests/data/analyzer/*`` (made by
``tests/data/analyzer/make_reference.py``). Identity is asserted token for token.
"""

from __future__ import annotations

import doctest
import gzip
import itertools
import json
from pathlib import Path

import pytest

from r2med.retrievers.bm25 import analyzer as analyzer_module
from r2med.retrievers.bm25 import porter, tokenizer
from r2med.retrievers.bm25.analyzer import (
    ENGLISH_STOP_WORDS,
    EnglishAnalyzer,
    analyze,
    analyze_token,
    char_class,
    java_lower,
    tokenize,
)
from r2med.retrievers.bm25.porter import stem

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "analyzer"
SHARED = ROOT.parent / "shared" / "data"

VARIANTS = {
    "default": {},
    "no_stem": {"stemming": False},
    "no_stop": {"stopwords": False},
    "no_stem_no_stop": {"stemming": False, "stopwords": False},
}


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def shared_file(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path


def texts_by_id(path: Path) -> dict[str, str]:
    return {row["id"]: row["text"] for row in read_jsonl(path)}


def token_lists_of_term_ids(analyzer: EnglishAnalyzer, texts: list[str]) -> list[list[str]]:
    """The token lists ``analyzer.term_ids`` (the indexing path) gives for ``texts``."""
    terms, ids, lengths = analyzer.term_ids(texts)
    tokens = [terms[i] for i in ids.tolist()]
    bounds = [0, *itertools.accumulate(lengths.tolist())]
    return [tokens[a:b] for a, b in itertools.pairwise(bounds)]


def mismatches(analyzer: EnglishAnalyzer, pairs: list[tuple[str, list[str]]]) -> list[tuple[str, list[str], list[str]]]:
    """(text, expected, got) for every text the analyzer gets wrong: one by one, in bulk and as term ids."""
    texts = [text for text, _ in pairs]
    bulk = analyzer.analyze_many(texts)
    single = [analyzer(text) for text in texts]
    by_ids = token_lists_of_term_ids(type(analyzer)(stopwords=analyzer.stopwords, stemming=analyzer.stemming), texts)
    return [
        (text, want, got)
        for (text, want), got, one, ids in zip(pairs, bulk, single, by_ids)
        if got != want or one != want or ids != want
    ]


# --------------------------------------------------------------------------- parity with the real analyzer


def test_scifact_every_document_and_query_is_token_identical():
    reference = read_jsonl(shared_file("scifact", "lucene_tokens.jsonl"))
    texts = {("doc", k): v for k, v in texts_by_id(shared_file("scifact", "corpus.jsonl")).items()}
    texts.update({("query", k): v for k, v in texts_by_id(shared_file("scifact", "query.jsonl")).items()})
    pairs = [(texts[(row["kind"], row["id"])], row["tokens"]) for row in reference]
    assert len(pairs) == 5183 + 300
    assert mismatches(EnglishAnalyzer(), pairs) == []


@pytest.mark.parametrize(
    ("collection", "part", "count"),
    [("cacm", "corpus", 3204), ("cacm", "query", 52), ("nfcorpus", "corpus", 3395), ("nfcorpus", "query", 323)],
)
def test_collections_are_token_identical(collection, part, count):
    texts = texts_by_id(shared_file(collection, f"{part}.jsonl"))
    reference = read_jsonl(DATA / f"{collection}_{part}.jsonl.gz")
    assert len(reference) == count
    pairs = [(texts[row["id"]], row["tokens"]) for row in reference]
    assert mismatches(EnglishAnalyzer(), pairs) == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_edge_cases_are_token_identical(variant):
    rows = read_jsonl(DATA / "edge_cases.jsonl")
    assert len(rows) > 400
    pairs = [(row["text"], row[variant]) for row in rows]
    assert mismatches(EnglishAnalyzer(**VARIANTS[variant]), pairs) == []


def test_random_strings_over_every_character_class_are_token_identical():
    rows = read_jsonl(DATA / "fuzz_cases.jsonl")
    assert len(rows) == 3000
    assert mismatches(EnglishAnalyzer(), [(row["text"], row["default"]) for row in rows]) == []


def test_fast_and_exact_tokenizers_agree_on_all_reference_texts():
    texts = [row["text"] for row in read_jsonl(DATA / "edge_cases.jsonl") + read_jsonl(DATA / "fuzz_cases.jsonl")]
    for text in texts:
        assert tokenize(text) == tokenizer.exact_tokens(text), text
        chunks = [tok for chunk in text.split() for tok in tokenizer.chunk_tokens(chunk)]
        if "\u202f" not in text:
            assert chunks == tokenize(text), text


# --------------------------------------------------------------------------- worked examples


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("   \n\t ", []),
        ("The dog's 3.5mg dose", ["dog", "3.5mg", "dose"]),
        ("1,000 and 10.2.3 and 5.", ["1,000", "10.2.3", "5"]),
        ("O'Neil’s dogs' it's", ["o'neil", "dog"]),
        ("e-mail john.doe@example.com", ["e", "mail", "john.do", "example.com"]),
        ("snake_case __init__ ___", ["snake_cas", "__init__"]),
        ("U.S. U.S.A.", ["u.", "u.s.a"]),
        ("TNF-α IL-1β", ["tnf", "α", "il", "1β"]),
        ("中文 カタカナ ひらがな 한국어", ["中", "文", "カタカナ", "ひ", "ら", "が", "な", "한국어"]),
        ("😀 👍🏻 🇺🇸 #️⃣ ©", ["😀", "👍🏻", "🇺🇸", "#️⃣", "©"]),
        ("İSTANBUL ΟΔΟΣ", ["istanbul", "οδοσ"]),
        ("relational hopping caresses", ["relat", "hop", "caress"]),
    ],
)
def test_worked_examples(text, expected):
    assert analyze(text) == expected
    assert EnglishAnalyzer()(text) == expected


def test_long_tokens_are_cut_into_255_unit_pieces():
    assert tokenize("a" * 600) == ["a" * 255, "a" * 255, "a" * 90]
    # the cut counts UTF-16 units: a supplementary character that would straddle it moves on
    assert tokenize("a" * 254 + "\U0001d6fc" + "b") == ["a" * 254, "\U0001d6fcb"]
    # the piece ends at the longest match inside the window: "." needs a letter after it
    assert tokenize("a" * 254 + ".b") == ["a" * 254, "b"]
    assert analyze("x" * 300 + "'s") == ["x" * 255, "x" * 45]


def test_stop_words_are_lucenes_33():
    assert len(ENGLISH_STOP_WORDS) == 33
    assert {"a", "the", "such", "will", "into", "their"} <= ENGLISH_STOP_WORDS
    assert "can" not in ENGLISH_STOP_WORDS and "from" not in ENGLISH_STOP_WORDS


def test_token_filters():
    assert analyze_token("Dog's") == "dog"
    assert analyze_token("DOG’S") == "dog"
    assert analyze_token("dog＇s") == "dog"
    assert analyze_token("The") == ""
    assert analyze_token("The", stopwords=False) == "the"
    assert analyze_token("Running", stemming=False) == "running"
    assert java_lower("ΟΔΟΣ İ K Å") == "οδοσ i k å"  # no final sigma; Kelvin and Angstrom signs fold


def test_character_classes():
    assert [char_class(c) for c in "aZ9.,:'\"_ "] == ["AL", "AL", "DIG", "MNL", "MN", "ML", "SQ", "DQ", "EN", "OTHER"]
    classes = ["HAN", "HIR", "KA", "SA", "SAX", "X", "ZWJ", "EC", "EMOD", "RI"]
    assert [char_class(c) for c in "中ひカก\u0e31\u0301\u200d😀🏻🇺"] == classes


def word_pairs(text: str) -> list[tuple[str, ...]]:
    """``"a>b c>d"`` -> ``[("a", "b"), ("c", "d")]``."""
    return [tuple(pair.split(">")) for pair in text.split()]


# word>stem pairs: Porter's own examples and the corners where Lucene's variant differs
PORTER_EXAMPLES = word_pairs(
    """
caresses>caress ponies>poni ties>ti caress>caress cats>cat feed>feed agreed>agre
plastered>plaster bled>bled motoring>motor sing>sing conflated>conflat troubled>troubl
sized>size hopping>hop tanned>tan falling>fall hissing>hiss fizzed>fizz failing>fail
filing>file happy>happi sky>sky relational>relat conditional>condit rational>ration
valenci>valenc digitizer>digit conformabli>conform radicalli>radic differentli>differ
vileli>vile analogousli>analog vietnamization>vietnam predication>predic operator>oper
feudalism>feudal decisiveness>decis hopefulness>hope callousness>callous formaliti>formal
sensitiviti>sensit sensibiliti>sensibl archaeology>archaeolog gas>ga this>thi is>is ion>ion
aed>a syzygy>syzygi 3.5mg>3.5mg
"""
)


@pytest.mark.parametrize(("word", "expected"), PORTER_EXAMPLES)
def test_porter_examples(word, expected):
    assert stem(word) == expected


def test_porter_matches_lucene_on_random_suffix_heavy_words():
    rows = read_jsonl(DATA / "porter_cases.jsonl.gz")
    assert len(rows) == 20000
    assert [(word, want) for word, want in rows if stem(word) != want] == []


def test_porter_counts_supplementary_characters_as_two_units():
    # Java sees U+1D6FC as a surrogate pair: two different consonants, so "𝛼𝛼" is no double
    # consonant and "o𝛼" + "ed" is no consonant-vowel-consonant ending (Lucene's own output)
    assert stem("a\U0001d6fc\U0001d6fcing") == "a\U0001d6fc\U0001d6fc"
    assert stem("ho\U0001d6fced") == "ho\U0001d6fc"
    assert stem("hoped") == "hope"


# --------------------------------------------------------------------------- API behaviour


def test_analyze_many_matches_single_calls_and_survives_a_tiny_cache():
    texts = [row["text"] for row in read_jsonl(DATA / "edge_cases.jsonl")]
    expected = [EnglishAnalyzer()(t) for t in texts]
    tiny = EnglishAnalyzer(max_cache_entries=3)
    assert tiny.analyze_many(texts) == expected
    assert tiny.analyze_many(texts) == expected  # second pass through the caches
    tiny.clear_cache()
    assert tiny.analyze_many(iter(texts)) == expected


@pytest.mark.parametrize("options", [{}, {"stemming": False}, {"stopwords": False}])
def test_term_ids_equal_provisional_ids_of_the_token_lists(options):
    from r2med.retrievers.bm25.vocabulary import provisional_ids

    texts = [row["text"] for row in read_jsonl(DATA / "edge_cases.jsonl")]
    # whitespace that str.split breaks on but Lucene keeps inside a token, stop-word-only and empty texts
    texts += ["x\u202fy dogs x\u202fy", "", "  \t ", "the of and", "Dogs dogs DOGS cats", "1\u202f000 dogs"]
    want = provisional_ids([EnglishAnalyzer(**options)(t) for t in texts])
    for analyzer in (EnglishAnalyzer(**options), EnglishAnalyzer(**options, max_cache_entries=3)):
        terms, ids, lengths = analyzer.term_ids(texts)
        assert terms == want[0]
        assert ids.tolist() == want[1].tolist()
        assert lengths.tolist() == want[2].tolist()
    assert [x.tolist() for x in EnglishAnalyzer().term_ids([])[1:]] == [[], []]
    with pytest.raises(TypeError, match=r"texts\[1\] must be str, got int"):
        EnglishAnalyzer().term_ids(["ok", 3])


def test_chunks_are_cached_once():
    analyzer = EnglishAnalyzer()
    assert analyzer.analyze_many(["Dogs, dogs.", "dogs. Dogs,"]) == [["dog", "dog"], ["dog", "dog"]]
    assert set(analyzer._chunks) == {"Dogs,", "dogs."}
    assert analyzer._chunks["Dogs,"] is analyzer._chunks["dogs."]  # one shared 1-tuple per term


def test_narrow_no_break_space_joins_tokens_like_lucene():
    # str.split() breaks on U+202F but Lucene treats it as a connector (ExtendNumLet)
    assert analyze("x\u202fy 1\u202f000") == ["x\u202fy", "1\u202f000"]


def test_bad_input_names_the_value():
    with pytest.raises(TypeError, match=r"texts\[1\] must be str, got bytes"):
        EnglishAnalyzer().analyze_many(["ok", b"bytes"])
    with pytest.raises(TypeError, match="got NoneType"):
        analyze(None)
    with pytest.raises(ValueError, match="max_cache_entries"):
        EnglishAnalyzer(max_cache_entries=0)


@pytest.mark.parametrize("module", [analyzer_module, tokenizer, porter])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
