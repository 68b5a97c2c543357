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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_BRACKET = re.compile(r"\[\s*(\d+)\s*\]")
_BRACKET_CHAIN = re.compile(r"\[\s*\d+\s*\](?:\s*(?:>|,|->|→)\s*\[\s*\d+\s*\])+")
_BARE_CHAIN = re.compile(r"(?<![\d.])\d+(?:\s*(?:>|->|→)\s*\d+)+(?![\d.])")
_NUMBER = re.compile(r"\d+")

SOURCES = ("bracket-chain", "brackets", "chain", "numbers", "none", "unfinished-trace")


@dataclass(frozen=True)
class PermutationReport:
    """What ``read_permutation`` made of an answer.

    ``order`` is the 0-based permutation of ``range(n)``; the other id lists are 1-based as written:
    ``read`` every identifier taken from the answer, ``duplicates`` and ``out_of_range`` the ones
    dropped, ``missing`` the ones appended in their previous order. ``source`` is one of ``SOURCES``.
    """

    order: tuple[int, ...]
    read: tuple[int, ...]
    duplicates: tuple[int, ...]
    out_of_range: tuple[int, ...]
    missing: tuple[int, ...]
    source: str

    @property
    def clean(self) -> bool:
        """True when the answer named every passage exactly once and nothing else."""
        return not (self.duplicates or self.out_of_range or self.missing)


def answer_part(text: str) -> str | None:
    """The text after the last ``</think>``; ``None`` for a trace that was opened and never closed.

    >>> answer_part("<think>[1] > [2]?</think> [2] > [1]"), answer_part("no tags")
    (' [2] > [1]', 'no tags')
    >>> answer_part("<think>still thinking [2] > [1]") is None
    True
    """
    close = text.rfind(_THINK_CLOSE)
    if text.rfind(_THINK_OPEN) > close:
        return None
    return text[close + len(_THINK_CLOSE):] if close >= 0 else text


def _longest(pattern: re.Pattern[str], text: str) -> str | None:
    best: str | None = None
    best_len = 0
    for match in pattern.finditer(text):
        length = len(_NUMBER.findall(match.group(0)))
        if length >= best_len:  # ">=": the last of equally long chains wins (a final answer follows drafts)
            best, best_len = match.group(0), length
    return best


def _identifiers(answer: str) -> tuple[list[int], str]:
    chain = _longest(_BRACKET_CHAIN, answer)
    if chain is not None:
        return [int(x) for x in _BRACKET.findall(chain)], "bracket-chain"
    bracketed = _BRACKET.findall(answer)
    if bracketed:
        return [int(x) for x in bracketed], "brackets"
    chain = _longest(_BARE_CHAIN, answer)
    if chain is not None:
        return [int(x) for x in _NUMBER.findall(chain)], "chain"
    numbers = _NUMBER.findall(answer)
    return ([int(x) for x in numbers], "numbers") if numbers else ([], "none")


def read_permutation(text: str, n: int) -> PermutationReport:
    """Parse ``text`` into a permutation of ``range(n)`` and report every repair made.

    >>> r = read_permutation("Ranking: [2] > [9] > [2] > [1]", 3)
    >>> r.order, r.read, r.duplicates, r.out_of_range, r.missing, r.source, r.clean
    ((1, 0, 2), (2, 9, 2, 1), (2,), (9,), (3,), 'bracket-chain', False)
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    answer = answer_part(text or "")
    ids, source = ([], "unfinished-trace") if answer is None else _identifiers(answer)
    return report_of(ids, n, source)


def report_of(ids: list[int], n: int, source: str) -> PermutationReport:
    """The permutation of ``range(n)`` that 1-based ``ids`` ask for (RankGPT's repair: repeats and identifiers
    outside ``1..n`` dropped, the passages never named appended in their order), with what was repaired.

    >>> r = report_of([3, 3, 0, 1], 4, "numbers")
    >>> r.order, r.duplicates, r.out_of_range, r.missing
    ((2, 0, 1, 3), (3,), (0,), (2, 4))
    """
    seen: set[int] = set()
    order: list[int] = []
    duplicates: list[int] = []
    out_of_range: list[int] = []
    for ident in ids:
        if not 1 <= ident <= n:
            out_of_range.append(ident)
        elif ident in seen:
            duplicates.append(ident)
        else:
            seen.add(ident)
            order.append(ident - 1)
    missing = [i + 1 for i in range(n) if i + 1 not in seen]
    order.extend(i - 1 for i in missing)
    return PermutationReport(tuple(order), tuple(ids), tuple(duplicates), tuple(out_of_range), tuple(missing), source)


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
