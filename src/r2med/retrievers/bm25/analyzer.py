"""Pyserini's default English analyzer in pure Python, token for token.

Pyserini 0.22.1's ``Analyzer(get_lucene_analyzer())`` (Anserini's ``DefaultEnglishAnalyzer`` on
Lucene 9.5) runs, in this order:

1. ``StandardTokenizer``: Unicode word segmentation (UAX #29 as Lucene's grammar implements it,
   with Unicode 9 character classes) plus emoji sequences, South-East Asian runs and single
   ideographs, hiragana; tokens longer than 255 UTF-16 units are cut into 255-unit pieces;
2. ``EnglishPossessiveFilter``: a trailing ``'s`` / ``’s`` / ``＇s`` (either case) is removed;
3. ``LowerCaseFilter``: Java's ``Character.toLowerCase`` per code point;
4. ``StopFilter`` with Lucene's 33 English stop words (:data:`ENGLISH_STOP_WORDS`);
5. ``PorterStemFilter`` (:mod:`r2med.retrievers.bm25.porter`).

Speed: Lucene's tokens never span whitespace and a token's term depends on its text alone, so
:class:`EnglishAnalyzer` splits a text on whitespace (``str.split``) and looks each chunk up in a
cache of chunk -> terms; the lookups of a whole text run in C.  Only a chunk seen for the first
time goes through the tokenizer (:mod:`r2med.retrievers.bm25.tokenizer`) and the filters.  Indexing
(:meth:`EnglishAnalyzer.term_ids`) goes further: NumPy cuts the texts' UTF-8 bytes into chunks and
maps them to term ids in a vectorised hash table (:mod:`r2med.retrievers.bm25.chunks`), with no
Python object per token.

>>> analyze("The dog's 3.5mg dose, in 1,000 U.S.A. patients.")
['dog', '3.5mg', 'dose', '1,000', 'u.s.a', 'patient']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import reduce as _reduce
from operator import iconcat as _iconcat

import numpy as np

from . import _lucene_tables
from .chunks import NativeChunkTable, NumpyChunkTable, PlainWords, first_occurrence, make_chunk_table
from .porter import stem as porter_stem
from .tokenizer import (
    EDGE_PUNCTUATION,
    MAX_TOKEN_LENGTH,
    char_class,
    chunk_tokens,
    tokenize,
)

__all__ = [
    "ENGLISH_STOP_WORDS",
    "MAX_TOKEN_LENGTH",
    "EnglishAnalyzer",
    "analyze",
    "analyze_token",
    "char_class",
    "java_lower",
    "tokenize",
]

logger = logging.getLogger(__name__)

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, which Pyserini's default analyzer uses.
ENGLISH_STOP_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
        "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to",
        "was", "will", "with",
    }
)  # fmt: skip

_POSSESSIVE_QUOTES = "'\u2019\uff07"


# ----------------------------------------------------------------------------------------------
# Token filters


def _java_lower_table() -> dict[int, int]:
    table = {}
    for start, count, stride, delta in _lucene_tables.LOWER_RUNS:
        for i in range(count):
            table[start + i * stride] = start + i * stride + delta
    return table


_JAVA_LOWER = _java_lower_table()


def java_lower(token: str) -> str:
    """Lower-case like Java 17's ``Character.toLowerCase`` applied per code point.

    Unlike ``str.lower`` there is no final-sigma rule and U+0130 becomes a plain ``i``.

    >>> java_lower("ΟΔΟΣ İzmir ǅ")
    'οδοσ izmir ǆ'
    """
    return token.lower() if token.isascii() else token.translate(_JAVA_LOWER)


def analyze_token(token: str, *, stopwords: bool = True, stemming: bool = True) -> str:
    """What the filter chain makes of one surface token; ``""`` when it is dropped.

    >>> [analyze_token(t) for t in ("Dogs", "dog's", "O’Neil’S", "The", "it's", "Running", "U.S")]
    ['dog', 'dog', 'o’neil', '', '', 'run', 'u.']
    """
    if len(token) >= 2 and token[-1] in "sS" and token[-2] in _POSSESSIVE_QUOTES:
        token = token[:-2]
    token = java_lower(token)
    if stopwords and token in ENGLISH_STOP_WORDS:
        return ""
    return porter_stem(token) if stemming else token


# ----------------------------------------------------------------------------------------------
# The analyzer


def _split_unsafe_whitespace() -> tuple[str, ...]:
    """Characters ``str.split()`` splits on that Lucene can keep inside a token (U+202F)."""
    candidates = [chr(c) for c in (*range(0x09, 0x0E), *range(0x1C, 0x21), 0x85, 0xA0, 0x1680, 0x180E)]
    candidates += [chr(c) for c in (*range(0x2000, 0x200C), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF)]
    return tuple(c for c in candidates if c.isspace() and char_class(c) != "OTHER")


_SPLIT_UNSAFE = _split_unsafe_whitespace()
_SPLIT_UNSAFE_SEARCH: Callable[[str], object] = (
    re.compile("[" + re.escape("".join(_SPLIT_UNSAFE)) + "]").search if _SPLIT_UNSAFE else (lambda text: None)
)
_EMPTY: tuple[str, ...] = ()
_EMPTY_IDS: tuple[int, ...] = ()


class EnglishAnalyzer:
    """Callable analyzer equal to Pyserini's ``Analyzer(get_lucene_analyzer(...))``.

    ``stopwords`` and ``stemming`` mirror ``get_lucene_analyzer``'s switches (Porter stemmer).

    Speed comes from caching: Lucene's tokens never span whitespace, and a token's term depends
    on nothing but its text, so each whitespace-separated chunk of a text (``"patients,"``)
    always yields the same terms.  The analyzer keeps chunk -> terms and token -> term caches, and
    for :meth:`term_ids` a chunk table; ``max_cache_entries`` bounds each (a cache is emptied when it
    grows past that; the chunk table when a call of :meth:`term_ids` starts with that many chunks).

    >>> EnglishAnalyzer()("Patients' outcomes were IMPROVED by the 2nd-line drug")
    ['patient', 'outcom', 'were', 'improv', '2nd', 'line', 'drug']
    >>> EnglishAnalyzer(stemming=False).analyze_many(["The outcomes", ""])
    [['outcomes'], []]
    """

    def __init__(self, *, stopwords: bool = True, stemming: bool = True, max_cache_entries: int = 2_000_000) -> None:
        if max_cache_entries < 1:
            raise ValueError(f"max_cache_entries must be at least 1, got {max_cache_entries!r}")
        self.stopwords = stopwords
        self.stemming = stemming
        self.max_cache_entries = max_cache_entries
        self._chunks: dict[str, tuple[str, ...]] = {}  # whitespace chunk -> its terms
        self._terms: dict[str, str] = {}  # surface token -> term ("" if dropped)
        self._singles: dict[str, tuple[str]] = {}  # term -> (term,), shared by many chunks
        self._id_of_term: dict[str, int] = {}  # term -> id, for this analyzer's lifetime
        self._id_terms: list[str] = []  # id -> term
        # chunk -> its term ids (term_ids); BM25's C kernel analyses plain words as _chunk_terms does
        words = PlainWords(ENGLISH_STOP_WORDS if stopwords else frozenset(), stemming, self._word_ids)
        self._chunk_table = make_chunk_table(self._chunk_term_ids, words)

    def __repr__(self) -> str:
        return f"EnglishAnalyzer(stopwords={self.stopwords}, stemming={self.stemming})"

    def __call__(self, text: str) -> list[str]:
        """Analyse one text into its list of terms."""
        return self.analyze_many((_require_str(text),))[0]

    analyze = __call__

    def analyze_many(self, texts: Iterable[str]) -> list[list[str]]:
        """Analyse many texts; the same as ``[self(t) for t in texts]``."""
        lookup = self._chunks.__getitem__
        unsafe = _SPLIT_UNSAFE_SEARCH
        out: list[list[str]] = []
        append = out.append
        for text in texts:
            try:
                if not text.isascii() and unsafe(text):
                    append(self._analyze_tokens(text))
                    continue
                pieces = text.split()
            except (TypeError, AttributeError):
                raise TypeError(f"texts[{len(out)}] must be str, got {type(text).__name__}: {text!r:.80}") from None
            terms: list[str] = []
            found = map(lookup, pieces)
            try:
                _reduce(_iconcat, found, terms)  # terms += each chunk's tuple of terms, all in C
            except KeyError as exc:
                self._resume(exc, found, terms, len(out))
            append(terms)
        return out

    def term_ids(self, texts: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """``vocabulary.provisional_ids(self.analyze_many(texts))`` without building the token lists.

        Returns ``(terms, ids, lengths)``: the distinct terms of ``texts`` in order of first occurrence,
        the flat term id (an index into ``terms``) of every token, and the number of tokens of each text.
        The texts' bytes are cut into chunks and a chunk table (:mod:`r2med.retrievers.bm25.chunks`)
        maps them to term ids this analyzer keeps for its lifetime (only a chunk seen for the first time
        is analysed in Python); the ids are then renumbered in order of first occurrence within ``texts``.

        >>> terms, ids, lengths = EnglishAnalyzer().term_ids(["Dogs bark, dogs.", "", "The cat's dogs"])
        >>> terms, ids.tolist(), lengths.tolist()
        (['dog', 'bark', 'cat'], [0, 1, 0, 2, 0], [3, 0, 2])
        """
        table = self._chunk_table
        if len(table) >= self.max_cache_entries:
            logger.debug("analyzer chunk table reached %d entries; clearing it", len(table))
            table.clear()
        return self._renumbered(*table.term_ids(texts))

    @property
    def chunk_table(self) -> NativeChunkTable | NumpyChunkTable:
        """The chunk table :meth:`term_ids` uses (chunk -> lifetime term ids; see :attr:`terms_by_id`)."""
        return self._chunk_table

    @property
    def terms_by_id(self) -> Sequence[str]:
        """The term of each lifetime term id the chunk table hands out (grows as new terms are met)."""
        return self._id_terms

    def _renumbered(self, ids: np.ndarray, counts: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Lifetime term ids renumbered in order of first occurrence: ``(terms, ids, counts)``."""
        if not len(ids):
            return [], ids, counts
        in_order, local = first_occurrence(ids, len(self._id_terms))
        return list(map(self._id_terms.__getitem__, in_order.tolist())), local, counts

    def _chunk_term_ids(self, chunk: str) -> tuple[int, ...]:
        """Lifetime term ids of one chunk (what the chunk table stores)."""
        return self._ids_of(self._chunk_terms(chunk))

    def _word_ids(self, term: str) -> tuple[int, ...]:
        """Lifetime id of one term, as a tuple (``()`` for ``""``, a dropped word)."""
        if not term:
            return _EMPTY_IDS
        i = self._id_of_term.get(term)
        if i is None:
            i = self._id_of_term[term] = len(self._id_terms)
            self._id_terms.append(term)
        return (i,)

    def _ids_of(self, terms: Iterable[str]) -> tuple[int, ...]:
        """Lifetime ids of ``terms`` (new terms get the next ids)."""
        ids = self._id_of_term
        out = []
        for term in terms:
            i = ids.get(term)
            if i is None:
                i = ids[term] = len(self._id_terms)
                self._id_terms.append(term)
            out.append(i)
        return tuple(out)

    def clear_cache(self) -> None:
        """Forget every cached chunk and token."""
        self._chunks.clear()
        self._terms.clear()
        self._singles.clear()
        self._chunk_table.clear()

    def _resume(self, exc: KeyError, found: Iterator[tuple[str, ...]], terms: list[str], index: int) -> None:
        """Add the chunk the lookup missed to the cache, then carry on where ``found`` stopped."""
        chunks = self._chunks
        if len(chunks) >= self.max_cache_entries:
            logger.debug("analyzer chunk cache reached %d entries; clearing it", len(chunks))
            chunks.clear()
        while True:
            chunk = exc.args[0]
            if not isinstance(chunk, str):
                raise TypeError(f"texts[{index}] must be str, got {type(chunk).__name__}") from None
            value = self._chunk_terms(chunk)
            chunks[chunk] = value
            terms += value
            try:
                _reduce(_iconcat, found, terms)
                return
            except KeyError as again:
                exc = again

    def _chunk_terms(self, chunk: str) -> tuple[str, ...]:
        """The terms of one whitespace-free chunk, as a tuple shared where possible."""
        core = chunk.strip(EDGE_PUNCTUATION) if chunk.isascii() else ""
        if core.isalnum() and len(core) <= MAX_TOKEN_LENGTH:  # a plain ASCII word: one token
            term = self._terms.get(core)
            terms = [self._new_term(core) if term is None else term]
        else:
            terms = self._terms_of(chunk_tokens(chunk))
        if len(terms) != 1 or not terms[0]:
            return tuple(filter(None, terms)) or _EMPTY
        single = self._singles.get(terms[0])
        if single is None:
            single = self._singles[terms[0]] = (terms[0],)
        return single

    def _analyze_tokens(self, text: str) -> list[str]:
        """Tokenize all of ``text`` at once (no chunk cache) and map the tokens to terms."""
        return self._terms_of(tokenize(text))

    def _terms_of(self, tokens: list[str]) -> list[str]:
        """Map surface tokens to terms through the token cache, dropping stop words."""
        get = self._terms.get
        terms = []
        for tok in tokens:
            term = get(tok)
            if term is None:
                term = self._new_term(tok)
            if term:
                terms.append(term)
        return terms

    def _new_term(self, token: str) -> str:
        cache = self._terms
        if len(cache) >= self.max_cache_entries:
            cache.clear()
            self._singles.clear()
        term = cache[token] = analyze_token(token, stopwords=self.stopwords, stemming=self.stemming)
        return term


def _require_str(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}: {text!r:.80}")
    return text


_DEFAULT: EnglishAnalyzer | None = None


def analyze(text: str) -> list[str]:
    """Analyse ``text`` with a shared default :class:`EnglishAnalyzer`.

    >>> analyze("Émile's 10.2.3 résumés")
    ['émile', '10.2.3', 'résumé']
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = EnglishAnalyzer()
    return _DEFAULT(text)
