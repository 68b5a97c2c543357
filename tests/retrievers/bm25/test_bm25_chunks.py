"""The chunk tables behind ``EnglishAnalyzer.term_ids`` (BM25's C kernel and its NumPy twin): exact keys, growth,
long chunks, failures. Every test runs on both."""

from __future__ import annotations

import doctest
import random

import numpy as np
import pytest

from r2med.retrievers.bm25 import chunks as chunks_module
from r2med.retrievers.bm25 import kernel
from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.chunks import SEPARATOR_BYTES, NativeChunkTable, NumpyChunkTable
from r2med.retrievers.bm25.tokenizer import char_class
from r2med.retrievers.bm25.vocabulary import provisional_ids


ChunkTable = NativeChunkTable | NumpyChunkTable


@pytest.fixture(params=["native", "numpy"])
def make(request, monkeypatch):
    """A chunk table class: the C kernel's, or NumPy's (with the kernel hidden, as where it was not built)."""
    if request.param == "numpy":
        monkeypatch.setattr(kernel, "native", None)
        return NumpyChunkTable
    if kernel.native is None:  # not built here: test_bm25_sparse's check of the build says so once
        pytest.skip("BM25's C kernel was not built")
    return NativeChunkTable


class Recorder:
    """``analyse`` for a chunk table: a chunk's terms are its code points; records every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, chunk: str) -> tuple[int, ...]:
        self.calls.append(chunk)
        return tuple(map(ord, chunk))


def expected(texts: list[str]) -> tuple[list[int], list[int]]:
    """What the table must give with ``Recorder``: every non-separator character, per text."""
    per_text = [[ord(c) for c in t if not (ord(c) < 128 and ord(c).to_bytes(1, "big") in SEPARATOR_BYTES)] for t in texts]
    return [i for ids in per_text for i in ids], [len(ids) for ids in per_text]


def run(table: ChunkTable, texts: list[str]) -> tuple[list[int], list[int]]:
    ids, lengths = table.term_ids(texts)
    return ids.tolist(), lengths.tolist()


def test_separators_are_exactly_the_ascii_bytes_lucene_never_keeps():
    assert SEPARATOR_BYTES == bytes([*range(0x21), 0x7F])
    assert all(char_class(chr(b)) == "OTHER" for b in SEPARATOR_BYTES)


def test_keys_are_exact_at_every_length_around_the_word_boundaries(make):
    # chunks of 1..40 bytes that differ only in their last byte, or only in length
    words = ["x" * n for n in range(1, 41)] + ["x" * (n - 1) + "y" for n in range(1, 41)]
    words += ["é" * n for n in range(1, 12)] + ["x" * 15 + "é", "x" * 16 + "é", "x" * 7 + "é"]  # 2-byte characters
    recorder = Recorder()
    table = make(recorder)
    texts = [" ".join(words), " ".join(reversed(words)), "\t".join(words * 2)]
    assert run(table, texts) == expected(texts)
    assert sorted(recorder.calls) == sorted(words)  # each chunk analysed once, none confused with another
    assert run(table, texts) == expected(texts)
    assert len(recorder.calls) == len(words)


def test_every_separator_cuts_and_nothing_else_does(make):
    texts = ["a" + chr(b) + "b" for b in SEPARATOR_BYTES] + ["a\u00a0b a\u202fb a\u3000b a\u2028b"]
    recorder = Recorder()
    ids, lengths = run(make(recorder), texts)
    assert (ids, lengths) == expected(texts)
    assert sorted(set(recorder.calls)) == sorted({"a", "b", "a\u00a0b", "a\u202fb", "a\u3000b", "a\u2028b"})


def test_empty_texts_texts_of_separators_and_no_texts(make):
    table = make(Recorder())
    assert run(table, []) == ([], [])
    texts = ["", " ", "\n\n", "a", "", "\x00", "b c", ""]
    assert run(table, texts) == expected(texts)


def test_surrogates_emoji_and_supplementary_characters_round_trip(make):
    texts = ["\ud800x \udfff", "😀👍🏻 𝛼𝛽", "ab\ud83dcd" * 3]
    recorder = Recorder()
    assert run(make(recorder), texts) == expected(texts)
    assert "\ud800x" in recorder.calls


def test_the_table_grows_and_keeps_its_chunk_ids(make):
    rng = random.Random(7)
    # 220,000 distinct chunks of 1-15 bytes (past three quarters of 2**16 slots, then of 2**18) and 2,000 long ones
    words = [format(i * 2654435761 % 2**40, "x") for i in range(220_000)]  # distinct: an odd multiplier mod 2**40
    words += [format(rng.getrandbits(128), "032x") + str(i) for i in range(2_000)]
    rng.shuffle(words)
    texts = [" ".join(words[i:i + 500]) for i in range(0, len(words), 500)]
    recorder = Recorder()
    table = make(recorder)
    first = run(table, texts[:40])
    if make is NumpyChunkTable:
        assert table._bits == 16
    grown = run(table, texts)
    if make is NumpyChunkTable:
        assert table._bits == 20  # grown twice
    assert grown == expected(texts)
    assert first == expected(texts[:40])
    assert len(recorder.calls) == len(words) == len(set(recorder.calls))
    assert run(table, texts[:40]) == first
    assert len(recorder.calls) == len(words)


def test_a_failing_analysis_leaves_the_table_usable(make):
    class Flaky(Recorder):
        fail = True

        def __call__(self, chunk: str) -> tuple[int, ...]:
            if self.fail and chunk in ("boom", "x" * 30):
                raise RuntimeError("analysis failed")
            return super().__call__(chunk)

    flaky = Flaky()
    table = make(flaky)
    for text in ("ok boom ok", "ok " + "x" * 30):
        with pytest.raises(RuntimeError):
            table.term_ids([text])
    flaky.fail = False
    texts = ["ok boom ok", "ok " + "x" * 30 + " boom"]
    assert run(table, texts) == expected(texts)


def test_non_strings_are_named(make):
    with pytest.raises(TypeError, match=r"texts\[2\] must be str, got NoneType"):
        make(Recorder()).term_ids(["a", "b", None])


def test_term_ids_equal_the_analyzer_on_random_texts_across_many_batches(make):
    rng = random.Random(11)
    pieces = ["dogs", "Dog's", "U.S.A.", "3.5mg", "1,000", "e-mail", "a.b@c.org", "x\u202fy", "日本", "ｶﾀｶﾅ",
              "😀", "(patients),", "the", "IS", "\x00", "\x7f", "é", "o'neil's", "x" * 300, "TNF-α", "\ud800"]
    seps = [" ", "  ", "\t", "\n", "\u00a0", "\u3000", "", "\x1f"]
    texts = ["".join(rng.choice(pieces) + rng.choice(seps) for _ in range(rng.randint(0, 30))) for _ in range(800)]
    analyzer = EnglishAnalyzer()
    assert isinstance(analyzer.chunk_table, make)
    for start in range(0, len(texts), 97):  # many batches through one lifetime table
        batch = texts[start:start + 97]
        terms, ids, lengths = analyzer.term_ids(batch)
        want = provisional_ids([EnglishAnalyzer()(t) for t in batch])
        assert terms == want[0]
        assert np.array_equal(ids, want[1])
        assert np.array_equal(lengths, want[2])


def test_docstring_examples():
    result = doctest.testmod(chunks_module)
    assert result.attempted > 0
    assert result.failed == 0
