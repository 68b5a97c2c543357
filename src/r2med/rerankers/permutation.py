"""Read a ranking of passage identifiers out of an LLM's answer, whatever it wrote.

The listwise prompt numbers a window's passages ``[1]`` .. ``[n]`` and asks for ``[3] > [1] > [2]``.
Models answer with that, or with prose around it, JSON lists, repeated or invented identifiers,
a reasoning trace in ``<think>`` tags, or nothing usable. ``parse_permutation`` always returns a
full permutation of ``range(n)`` (0-based): identifiers are read in the order given, repeats and
identifiers outside ``1..n`` are dropped, and passages never mentioned keep their previous
relative order after the ones that were (RankGPT's repair). ``read_permutation`` also says what
was repaired, for logging.

Where the identifiers are read from, first match wins:

1. the text after the last ``</think>`` (a trace opened by ``<think>`` and never closed is no answer:
   the window keeps its order);
2. the longest chain of bracketed identifiers joined by ``>``, ``,``, ``->`` or ``→``
   (the last of equally long ones); else every bracketed identifier in order;
3. the longest chain of bare numbers joined by ``>``, ``->`` or ``→``; else every number in order.

An identifier is a run of decimal digits of any script (Python's ``\\d``: ``[٣]`` is 3); superscripts and other
digits that are not decimal (``²``, ``₂``, ``①``) are not digits here. The parse is total and bounded: any text
in, a permutation out, never an exception; memory a small multiple of the answer's size whatever its shape (the
chains are followed one identifier at a time, a number longer than ``n``'s is out of range without being
converted, and the report keeps the first ``SAMPLE`` identifiers read, repeated and out of range with their counts).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_BRACKET = re.compile(r"\[\s*(\d+)\s*\]")
# what joins two identifiers of a chain; a chain is followed element by element (see _chains): the regex
# r"\[\s*\d+\s*\](?:\s*(?:>|,|->|→)\s*\[\s*\d+\s*\])+" finds the same chains but keeps ~75 bytes of backtracking
# state per character of a long one
_BRACKET_JOIN = re.compile(r"\s*(?:>|,|->|→)\s*")
_NUMBER = re.compile(r"\d+")
_BARE_JOIN = re.compile(r"\s*(?:>|->|→)\s*")

SOURCES = ("bracket-chain", "brackets", "chain", "numbers", "none", "unfinished-trace")
#: how many identifiers a report lists in ``read``, ``duplicates`` and ``out_of_range`` (all are counted)
SAMPLE = 100
#: the longest identifier (significant digits) a report lists: 640 is the lowest limit Python's
#: ``sys.set_int_max_str_digits`` accepts, so ``int()`` takes it whatever the limit is set to
SHOWN_DIGITS = 640


@dataclass(frozen=True)
class PermutationReport:
    """What ``read_permutation`` made of an answer.

    ``order`` is the 0-based permutation of ``range(n)``; the other id lists are 1-based as written:
    ``read`` the identifiers taken from the answer, ``duplicates`` and ``out_of_range`` the ones
    dropped, each list the first ``SAMPLE`` of them (an identifier of more than ``SHOWN_DIGITS`` digits is
    counted, not listed), with ``read_count``, ``duplicate_count`` and ``out_of_range_count`` the numbers of all
    (never fewer than listed); ``missing`` the ones appended in their previous order. ``source`` is one of
    ``SOURCES`` (or of the reader's own, ReasonRank's); ``unreadable`` the number that made a reader give up
    (ReasonRank's ``unparsable``), cut to 40 characters.
    """

    order: tuple[int, ...]
    read: tuple[int, ...]
    duplicates: tuple[int, ...]
    out_of_range: tuple[int, ...]
    missing: tuple[int, ...]
    source: str
    read_count: int = 0
    duplicate_count: int = 0
    out_of_range_count: int = 0
    unreadable: str = ""

    def __post_init__(self) -> None:
        for count, listed in (("read_count", self.read), ("duplicate_count", self.duplicates),
                              ("out_of_range_count", self.out_of_range)):
            object.__setattr__(self, count, max(getattr(self, count), len(listed)))

    @property
    def clean(self) -> bool:
        """True when the answer named every passage exactly once and nothing else."""
        return not (self.duplicate_count or self.out_of_range_count or self.missing)


@functools.cache
def _digit_tables() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """``(digits, zeros)``: a run of characters ``str.isdigit`` accepts, and a run of decimal zeros of any script,
    from this Python's Unicode tables (one pass over the code points, ~0.1 s, at the first use)."""
    import unicodedata

    digits = [cp for cp in range(sys.maxunicode + 1) if chr(cp).isdigit()]
    zeros = [cp for cp in digits if chr(cp).isdecimal() and unicodedata.decimal(chr(cp)) == 0]

    def char_class(points: list[int]) -> str:
        ranges: list[list[int]] = []
        for cp in points:
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
        return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)

    return re.compile(f"[{char_class(digits)}]+"), re.compile(f"[{char_class(zeros)}]*")


def isdigit_runs(text: str, pos: int = 0, endpos: int | None = None) -> Iterator[re.Match[str]]:
    """The maximal runs of characters that ``str.isdigit`` accepts (decimals, superscripts, circled digits, ...), as
    matches: the tokens of ``"".join(c if c.isdigit() else " " for c in text).split()``, without that string.

    >>> [m.group() for m in isdigit_runs("CO₂: [3] > [12²]")]
    ['₂', '3', '12²']
    """
    return _digit_tables()[0].finditer(text, pos, len(text) if endpos is None else endpos)


class ReportBuilder:
    """Builds the ``PermutationReport`` of a window of ``n`` passages from identifiers given one at a time, in
    memory bounded by ``n`` and ``SAMPLE`` (RankGPT's repair: repeats and identifiers outside ``1..n`` dropped, the
    passages never named appended in their order).

    >>> text, b = "[2] > [٣] > [0002] > [99999]", ReportBuilder(3)
    >>> for m in re.finditer(r"\\d+", text):
    ...     b.digits(text, m.start(), m.end())
    >>> r = b.report("brackets")
    >>> r.order, r.read, r.duplicates, r.out_of_range, r.missing
    ((1, 2, 0), (2, 3, 2, 99999), (2,), (99999,), (1,))
    """

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.n = n
        self._width = len(str(n))
        self._seen: set[int] = set()
        self._order: list[int] = []
        self._read: list[int] = []
        self._duplicates: list[int] = []
        self._out_of_range: list[int] = []
        self._counts = [0, 0, 0]  # read, duplicates, out of range

    def digits(self, text: str, start: int, end: int) -> None:
        """Add the identifier written by the decimal digits ``text[start:end]`` (of any script, leading zeros
        allowed); one with more significant digits than ``n`` is out of range without being converted."""
        if end - start > self._width:
            start = _digit_tables()[1].match(text, start, end).end()  # type: ignore[union-attr]  # always matches
        if end - start <= self._width:
            self.add(int(text[start:end]) if end > start else 0)
        else:
            self._count_read(int(text[start:end]) if end - start <= SHOWN_DIGITS else None)
            self._counts[2] += 1
            if end - start <= SHOWN_DIGITS and len(self._out_of_range) < SAMPLE:
                self._out_of_range.append(int(text[start:end]))

    def add(self, ident: int) -> None:
        """Add one 1-based identifier."""
        self._count_read(ident)
        if not 1 <= ident <= self.n:
            self._counts[2] += 1
            if len(self._out_of_range) < SAMPLE:
                self._out_of_range.append(ident)
        elif ident in self._seen:
            self._counts[1] += 1
            if len(self._duplicates) < SAMPLE:
                self._duplicates.append(ident)
        else:
            self._seen.add(ident)
            self._order.append(ident - 1)

    def _count_read(self, ident: int | None) -> None:
        self._counts[0] += 1
        if ident is not None and len(self._read) < SAMPLE:
            self._read.append(ident)

    def report(self, source: str) -> PermutationReport:
        missing = [i + 1 for i in range(self.n) if i + 1 not in self._seen]
        order = self._order + [i - 1 for i in missing]
        return PermutationReport(tuple(order), tuple(self._read), tuple(self._duplicates), tuple(self._out_of_range),
                                 tuple(missing), source, *self._counts)


def kept_order(n: int, source: str, unreadable: str = "") -> PermutationReport:
    """The report of a window that keeps its order: nothing read, every passage ``missing`` (appended in order).

    >>> r = kept_order(3, "unparsable", "²")
    >>> r.order, r.missing, r.clean, r.unreadable
    ((0, 1, 2), (1, 2, 3), False, '²')
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return PermutationReport(tuple(range(n)), (), (), (), tuple(range(1, n + 1)), source, unreadable=unreadable)


def answer_part(text: str) -> str | None:
    """The text after the last ``</think>``; ``None`` for a trace that was opened and never closed.

    >>> answer_part("<think>[1] > [2]?</think> [2] > [1]"), answer_part("no tags")
    (' [2] > [1]', 'no tags')
    >>> answer_part("<think>still thinking [2] > [1]") is None
    True
    """
    start = _answer_start(text)
    return None if start is None else text[start:]


def _answer_start(text: str) -> int | None:
    close = text.rfind(_THINK_CLOSE)
    if text.rfind(_THINK_OPEN) > close:
        return None
    return close + len(_THINK_CLOSE) if close >= 0 else 0


def _chains(elements: Iterable[re.Match[str]], text: str, join: re.Pattern[str], *, bare: bool,
            pos: int) -> Iterator[tuple[int, int, int]]:
    """``(start, end, length)`` of each chain of two or more ``elements`` joined by ``join``, left to right: the
    matches of ``element(?:join element)+`` (bare numbers: with ``(?<![\\d.])`` before and ``(?![\\d.])`` after, so a
    chain does not start after, nor end before, a ``.``), found in constant memory."""
    first = second = before_last = last = None
    length = 0

    def close() -> tuple[int, int, int] | None:
        assert first is not None and last is not None
        start, end, count = first.start(), last.end(), length
        if bare and start > pos and text[start - 1] == ".":  # the lookbehind refuses the first number
            start, count = second.start() if second is not None else end, count - 1
        if bare and end < len(text) and text[end] == ".":  # the lookahead refuses the last
            end, count = before_last.end() if before_last is not None else start, count - 1
        return (start, end, count) if count >= 2 else None

    for match in elements:
        if last is not None and join.fullmatch(text, last.end(), match.start()):
            length += 1
            second = match if length == 2 else second
            before_last, last = last, match
            continue
        if last is not None and length >= 2 and (found := close()) is not None:
            yield found
        first, second, before_last, last, length = match, None, None, match, 1
    if last is not None and length >= 2 and (found := close()) is not None:
        yield found


def _longest(chains: Iterable[tuple[int, int, int]]) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    best_len = 0
    for start, end, length in chains:
        if length >= best_len:  # ">=": the last of equally long chains wins (a final answer follows drafts)
            best, best_len = (start, end), length
    return best


def _identifiers(text: str, pos: int, builder: ReportBuilder) -> str:
    """Feed ``builder`` the identifiers of ``text[pos:]`` by the rules of the module docstring; the source."""
    chain = _longest(_chains(_BRACKET.finditer(text, pos), text, _BRACKET_JOIN, bare=False, pos=pos))
    if chain is not None:
        for m in _BRACKET.finditer(text, *chain):
            builder.digits(text, m.start(1), m.end(1))
        return "bracket-chain"
    if _BRACKET.search(text, pos) is not None:
        for m in _BRACKET.finditer(text, pos):
            builder.digits(text, m.start(1), m.end(1))
        return "brackets"
    chain = _longest(_chains(_NUMBER.finditer(text, pos), text, _BARE_JOIN, bare=True, pos=pos))
    numbers, source = (_NUMBER.finditer(text, *chain), "chain") if chain is not None else \
        (_NUMBER.finditer(text, pos), "numbers")
    read = False
    for m in numbers:
        builder.digits(text, m.start(), m.end())
        read = True
    return source if read else "none"


def read_permutation(text: str, n: int) -> PermutationReport:
    """Parse ``text`` into a permutation of ``range(n)`` and report every repair made.

    >>> r = read_permutation("Ranking: [2] > [9] > [2] > [1]", 3)
    >>> r.order, r.read, r.duplicates, r.out_of_range, r.missing, r.source, r.clean
    ((1, 0, 2), (2, 9, 2, 1), (2,), (9,), (3,), 'bracket-chain', False)
    """
    builder = ReportBuilder(n)
    text = text or ""
    start = _answer_start(text)
    if start is None:
        return builder.report("unfinished-trace")
    return builder.report(_identifiers(text, start, builder))


def report_of(ids: Iterable[int], n: int, source: str) -> PermutationReport:
    """The permutation of ``range(n)`` that 1-based ``ids`` ask for (RankGPT's repair: repeats and identifiers
    outside ``1..n`` dropped, the passages never named appended in their order), with what was repaired.

    >>> r = report_of([3, 3, 0, 1], 4, "numbers")
    >>> r.order, r.duplicates, r.out_of_range, r.missing
    ((2, 0, 1, 3), (3,), (0,), (2, 4))
    """
    builder = ReportBuilder(n)
    for ident in ids:
        builder.add(ident)
    return builder.report(source)


def parse_permutation(text: str, n: int) -> list[int]:
    """The 0-based order of ``n`` passages that ``text`` asks for (always a permutation of ``range(n)``).

    >>> parse_permutation("[3] > [1] > [2]", 3)
    [2, 0, 1]
    >>> parse_permutation("<think>maybe [1] > [3]</think>\\n[2] > [2] > [7] > [3]", 4)
    [1, 2, 0, 3]
    >>> parse_permutation("I cannot rank these.", 3)
    [0, 1, 2]
    """
    return list(read_permutation(text, n).order)
