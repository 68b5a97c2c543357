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
time goes through the tokenizer (:mod:`r2med.retrievers.bm25.tokenizer`) and the filters.

>>> analyze("The dog's 3.5mg dose, in 1,000 U.S.A. patients.")
['dog', '3.5mg', 'dose', '1,000', 'u.s.a', 'patient']
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import reduce as _reduce
from operator import iconcat as _iconcat

import numpy as np

from . import _lucene_tables
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


class EnglishAnalyzer:
    """Callable analyzer equal to Pyserini's ``Analyzer(get_lucene_analyzer(...))``.

    ``stopwords`` and ``stemming`` mirror ``get_lucene_analyzer``'s switches (Porter stemmer).

    Speed comes from caching: Lucene's tokens never span whitespace, and a token's term depends
    on nothing but its text, so each whitespace-separated chunk of a text (``"patients,"``)
    always yields the same terms.  The analyzer keeps chunk -> terms and token -> term caches;
    ``max_cache_entries`` bounds each (it is emptied when it grows past that).

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

        Returns ``(terms, ids, lengths)``: the distinct terms in order of first occurrence, the
        flat term id of every token, and the number of tokens of each text.  Each distinct
        whitespace chunk is analysed once and its term ids are spread over its occurrences with
        NumPy; the per-token Python work is one ``str.split`` and one dict lookup per chunk.
        Terms still come out in order of first occurrence: a term first occurs in the first chunk
        holding it, and chunks are visited in order of their first occurrence.

        >>> terms, ids, lengths = EnglishAnalyzer().term_ids(["Dogs bark, dogs.", "", "The cat's dogs"])
        >>> terms, ids.tolist(), lengths.tolist()
        (['dog', 'bark', 'cat'], [0, 1, 0, 2, 0], [3, 0, 2])
        """
        texts = texts if isinstance(texts, Sequence) else list(texts)
        unsafe = _SPLIT_UNSAFE_SEARCH
        pieces: list[list[str]] = []
        append = pieces.append
        for index, text in enumerate(texts):
            try:
                if text.isascii() or not unsafe(text):
                    append(text.split())
                    continue
            except (TypeError, AttributeError):
                raise TypeError(f"texts[{index}] must be str, got {type(text).__name__}: {text!r:.80}") from None
            # a whitespace Lucene keeps inside tokens: analyse the whole text; " " marks a term (no chunk has one)
            append([" " + term for term in self._analyze_tokens(text)])
        n_texts = len(pieces)
        chunks_per_text = np.fromiter(map(len, pieces), dtype=np.int64, count=n_texts)
        chunk_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        occurrences = np.fromiter(
            map(chunk_ids.__getitem__, itertools.chain.from_iterable(pieces)),
            dtype=np.int64,
            count=int(chunks_per_text.sum()),
        )
        del pieces
        # the terms of each distinct chunk, as ids in order of first occurrence
        term_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        new_id = term_ids.__getitem__
        cached = self._chunks.get
        store = self._chunks
        flat: list[int] = []
        sizes: list[int] = []
        for chunk in chunk_ids:
            if chunk[0] == " ":
                terms: tuple[str, ...] = (chunk[1:],)
            else:
                value = cached(chunk)
                if value is None:
                    if len(store) >= self.max_cache_entries:
                        store.clear()
                    value = store[chunk] = self._chunk_terms(chunk)
                terms = value
            flat.extend(map(new_id, terms))
            sizes.append(len(terms))
        chunk_size = np.asarray(sizes, dtype=np.int64)
        chunk_start = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(chunk_size, out=chunk_start[1:])
        chunk_terms = np.asarray(flat, dtype=np.int64)
        # spread: occurrence i of chunk c contributes chunk_terms[chunk_start[c] : chunk_start[c] + chunk_size[c]]
        tokens_per_occurrence = chunk_size[occurrences]
        token_end = np.cumsum(tokens_per_occurrence)
        n_tokens = int(token_end[-1]) if len(token_end) else 0
        offset = chunk_start[occurrences] - (token_end - tokens_per_occurrence)
        ids = chunk_terms[np.arange(n_tokens, dtype=np.int64) + np.repeat(offset, tokens_per_occurrence)]
        text_end = np.cumsum(chunks_per_text)
        token_bounds = np.r_[0, token_end][np.r_[0, text_end]]
        lengths = np.diff(token_bounds)
        return list(term_ids), ids, lengths

    def clear_cache(self) -> None:
        """Forget every cached chunk and token."""
        self._chunks.clear()
        self._terms.clear()
        self._singles.clear()

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
