"""Lucene 9.5's ``StandardTokenizer`` in pure Python: the same tokens for any text.

Lucene's tokenizer is a JFlex scanner (``StandardTokenizerImpl.jflex``) for the word-break rules
of Unicode's UAX #29 plus emoji sequences, South-East Asian runs, ideographs and hiragana,
compiled against Unicode 9 character data and scanning through a 255-character buffer, so that a
longer token is cut into 255-unit (UTF-16) pieces.  This module reproduces it from

- ``_lucene_tables.CLASSES``: each code point's class *as Lucene's scanner treats it*, measured
  by running the real tokenizer over probe strings for every code point (so Python's own,
  newer Unicode data plays no part);
- a fast regular expression for text without the rare classes, run over the text translated to
  one letter per character class (so that it compiles in a millisecond);
- an exact longest-match scanner: a DFA built from the grammar's token rules, used for text with
  Hebrew letters, emoji modifiers and ZWJ sequences, keycaps, flags, tags, characters outside the
  BMP, or tokens over 255 characters.

>>> tokenize("Hello, World! e-mail: a.b@c.org 3.5 1,000 _x_ 日本 ｶﾀｶﾅ 😀👍🏻")
['Hello', 'World', 'e', 'mail', 'a.b', 'c.org', '3.5', '1,000', '_x_', '日', '本', 'ｶﾀｶﾅ', '😀', '👍🏻']
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from . import _lucene_tables

__all__ = ["EDGE_PUNCTUATION", "MAX_TOKEN_LENGTH", "char_class", "chunk_tokens", "exact_tokens", "tokenize"]

#: ``StandardTokenizer``'s default maximum token length, in UTF-16 code units.
MAX_TOKEN_LENGTH = 255


# ----------------------------------------------------------------------------------------------
# Character classes


def _parse_ranges(spec: str) -> list[tuple[int, int]]:
    """Parse ``"41-5A 61"`` into inclusive code point ranges.

    >>> _parse_ranges("41-5A 61 1F600-1F64F")
    [(65, 90), (97, 97), (128512, 128591)]
    """
    out = []
    for item in spec.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


_CLASSES: dict[str, list[tuple[int, int]]] = {
    name: _parse_ranges(spec) for name, spec in _lucene_tables.CLASSES.items()
}


def _escape(cp: int) -> str:
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _class_body(*names: str, bmp_only: bool = True, extra: Iterable[tuple[int, int]] = ()) -> str:
    """The inside of a regex character class holding the named classes' code points.

    >>> _class_body("SQ", "DQ")
    '\\\\u0027\\\\u0022'
    """
    ranges = [r for name in names for r in _CLASSES[name]] + list(extra)
    parts = []
    for lo, hi in ranges:
        if bmp_only:
            if lo > 0xFFFF:
                continue
            hi = min(hi, 0xFFFF)
        parts.append(_escape(lo) if lo == hi else f"{_escape(lo)}-{_escape(hi)}")
    return "".join(parts)


# ----------------------------------------------------------------------------------------------
# Fast path: one regular expression over the text's class symbols
#
# ``str.translate`` maps each BMP character to one letter naming its class (``_SYMBOL``; "~" for a
# character of no class), and the expression runs over those letters: its character classes hold a
# few letters instead of tens of thousands of code points, so it compiles in about a millisecond
# (the same expression over code points took 0.3-0.6 s to compile in every process).  A match's span
# in the symbols is the token's span in the text.

#: class name -> the one letter that stands for it in the translated text
_SYMBOL = {name: chr(ord("A") + i) if i < 26 else chr(ord("a") + i - 26) for i, name in enumerate(sorted(_CLASSES))}
_NO_CLASS = "~"


def _symbol_table() -> str:
    """A 65,536-character table for ``str.translate``: the class letter of every BMP code point.

    Characters outside the BMP are past its end, so ``translate`` leaves them as they are (they match no class
    letter, and the rare search sends their text to the exact scanner before the fast path sees it).
    """
    bmp = sorted((lo, min(hi, 0xFFFF), name) for name, ranges in _CLASSES.items() for lo, hi in ranges if lo <= 0xFFFF)
    # disjoint ranges (char_class's bisect assumes it too), checked on the sorted ranges, not character by character
    # (that took 5 ms of every process's start)
    for (_, end, _), (lo, hi, name) in zip(bmp, bmp[1:]):
        if lo <= end:
            raise ValueError(f"_lucene_tables.CLASSES: {name} overlaps another class at U+{lo:04X}-U+{hi:04X}")
    table = [_NO_CLASS] * 0x10000
    for lo, hi, name in bmp:
        table[lo:hi + 1] = _SYMBOL[name] * (hi - lo + 1)
    return "".join(table)


_SYMBOLS = _symbol_table()


def _class_letters(*names: str) -> str:
    """The inside of a regex character class over class letters.

    >>> _class_letters("SQ", "DQ") == _SYMBOL["SQ"] + _SYMBOL["DQ"]
    True
    """
    return "".join(_SYMBOL[name] for name in names)


def _fast_pattern() -> str:
    """The fast tokenizer expression, over class letters.

    It starts with one character class (so ``re`` skips non-token characters at C speed) and
    then dispatches on that first character with a one-character look-behind.  Pure letter and
    digit runs, by far the most common tokens, take the first branch; the other branches spell
    out Lucene's WORD rule (UAX #29 WB5-WB13b), South-East Asian runs, ideographs, hiragana and
    simple emoji.  Every character of the rare classes is a one-character match of its own,
    which sends the text to the exact scanner.
    """
    c = _class_letters
    al = c("AL")
    nu = c("NU", "DIG")
    ml = c("ML", "MNL", "SQ")
    mn = c("MN", "MNL", "SQ")
    en = c("EN")
    ka = c("KA")
    sa = c("SA", "SAX")
    han = c("HAN")
    hir = c("HIR")
    ec = c("EC")
    ps = c("PS")  # U+FE0F alone
    xp = c("X", "SAX")  # Extend | Format, without ZWJ (rare) and without FE0E/FE0F
    x = xp + c("TS", "PS")
    rare = c(*_RARE_CLASSES) + "\\U00010000-\\U0010ffff"  # translate leaves characters outside the BMP as they are
    ext = f"(?:[{en}][{x}]*)"
    a_rest = f"[{al}{x}]*(?:[{ml}][{x}]*[{al}][{al}{x}]*)*"
    n_rest = f"[{nu}{x}]*(?:[{mn}][{x}]*[{nu}][{nu}{x}]*)*"
    a_run = f"[{al}]{a_rest}"
    n_run = f"[{nu}]{n_rest}"
    k_rest = f"[{ka}{x}]*"
    core = f"(?:(?:{a_run}|{n_run})+|[{ka}]{k_rest})"
    tail = f"(?:{ext}+{core})*{ext}*"
    # a letter/digit run that nothing can extend: the next character is no letter, digit,
    # extender or connector, and no mid-word punctuation followed by a letter or digit
    plain = f"[{al}{nu}{x}]*(?![{al}{nu}{x}{en}]|[{ml}][{x}]*[{al}]|[{mn}][{x}]*[{nu}])"
    start = al + nu + en + ka + sa + han + hir + ec + rare
    return (
        f"[{start}](?:"
        f"(?<=[{al}{nu}]){plain}"
        f"|(?<=[{al}]){a_rest}(?:{a_run}|{n_run})*{tail}"
        f"|(?<=[{nu}]){n_rest}(?:{a_run}|{n_run})*{tail}"
        f"|(?<=[{ka}]){k_rest}{tail}"
        f"|(?<=[{en}])[{x}]*{ext}*{core}{tail}"
        f"|(?<=[{sa}])[{sa}{x}]*"
        f"|(?<=[{han}{hir}])[{x}]*"
        f"|(?<=[{ec}])[{xp}]*{ps}?"
        f"|(?<=[{rare}]))"
    )


_RARE_CLASSES = ("HE", "ALEC", "ZWJ", "KC", "EMOD", "RI", "TAGS", "TAGT")
_RARE_BODY = _class_body(*_RARE_CLASSES, bmp_only=False, extra=[(0x10000, 0x10FFFF)])
_FAST_FINDITER = re.compile(_fast_pattern()).finditer
_RARE_SEARCH = re.compile(f"[{_RARE_BODY}]").search


def _fast_tokens(text: str) -> list[str]:
    """The fast expression's tokens of ``text`` (its matches over the class letters, cut from the text)."""
    return [text[m.start():m.end()] for m in _FAST_FINDITER(text.translate(_SYMBOLS))]


# ----------------------------------------------------------------------------------------------
# Exact path: a DFA compiled from Lucene's StandardTokenizer grammar


def _sym(*names: str) -> tuple:
    return ("sym", frozenset(names))


def _cat(*items: tuple) -> tuple:
    return ("cat", *items)


def _alt(*items: tuple) -> tuple:
    return ("alt", *items)


def _star(item: tuple) -> tuple:
    return ("star", item)


def _plus(item: tuple) -> tuple:
    return _cat(item, _star(item))


def _opt(item: tuple) -> tuple:
    return _alt(item, ("cat",))


def _grammar() -> tuple:
    """Lucene 9.5 ``StandardTokenizerImpl.jflex`` token rules over our class names.

    Rules whose language another rule already covers (NUM inside WORD, HANGUL and KATAKANA runs
    inside WORD) are left out: only the token text matters here, not its type.
    """
    x_names = ("X", "SAX", "EMOD", "ZWJ", "KC", "TS", "PS", "TAGS", "TAGT")
    x = _star(_sym(*x_names))
    xp = _star(_sym(*(n for n in x_names if n not in ("TS", "PS"))))

    def ex(*names: str) -> tuple:
        return _cat(_sym(*names), x)

    zwj = _sym("ZWJ")
    emoji_char = _cat(_star(zwj), _sym("EC", "ALEC"), xp, _opt(_sym("PS")))
    modifier = _cat(_sym("EMOD"), xp)  # Emoji_Modifier_Base is within EC, Emoji_Modifier within X
    ecp = _alt(emoji_char, modifier)
    emoji = _alt(
        _cat(ecp, _alt(_star(_cat(zwj, ecp)), _cat(_plus(_sym("TAGS")), _sym("TAGT")))),
        _cat(_sym("DIG", "KCB"), xp, _opt(_sym("PS")), _sym("KC"), xp),
        _cat(ex("RI"), ex("RI")),
    )
    letter = ex("AL", "HE", "ALEC")
    number = ex("NU", "DIG")
    katakana = ex("KA")
    extend_num_let = ex("EN")
    hebrew = ex("HE")
    mid_letter = ex("ML", "MNL", "SQ")
    mid_num = ex("MN", "MNL", "SQ")
    units = _plus(
        _alt(
            _cat(hebrew, _alt(ex("SQ"), _cat(ex("DQ"), hebrew))),
            _cat(number, _star(_cat(_alt(_star(extend_num_let), mid_num), number))),
            _cat(letter, _star(_cat(_alt(_star(extend_num_let), mid_letter), letter))),
        )
    )
    core = _alt(_cat(katakana, _star(_cat(_star(extend_num_let), katakana))), units)
    word = _cat(_star(extend_num_let), core, _star(_cat(_plus(extend_num_let), core)), _star(extend_num_let))
    return _alt(
        emoji,
        word,
        _plus(ex("SA", "SAX")),
        ex("HAN"),
        ex("HIR"),
    )


class _DFA:
    """Lazily determinised Thompson automaton over class names; longest-match scanning."""

    def __init__(self, grammar: tuple) -> None:
        self._eps: list[list[int]] = []
        self._moves: list[list[tuple[frozenset, int]]] = []
        start, self._accept = self._state(), self._state()
        self._build(grammar, start, self._accept)
        self.start = self._closure({start})
        self._next: dict[tuple[frozenset, str], frozenset] = {}

    def _state(self) -> int:
        self._eps.append([])
        self._moves.append([])
        return len(self._eps) - 1

    def _build(self, node: tuple, src: int, dst: int) -> None:
        kind = node[0]
        if kind == "sym":
            self._moves[src].append((node[1], dst))
        elif kind == "cat":
            items = node[1:]
            if not items:
                self._eps[src].append(dst)
                return
            cur = src
            for i, item in enumerate(items):
                nxt = dst if i == len(items) - 1 else self._state()
                self._build(item, cur, nxt)
                cur = nxt
        elif kind == "alt":
            for item in node[1:]:
                self._build(item, src, dst)
        elif kind == "star":
            hub = self._state()
            self._eps[src].append(hub)
            self._eps[hub].append(dst)
            loop_end = self._state()
            self._build(node[1], hub, loop_end)
            self._eps[loop_end].append(hub)
        else:  # pragma: no cover - the grammar only uses the kinds above
            raise ValueError(f"unknown grammar node {kind!r}")

    def _closure(self, states: set[int]) -> frozenset:
        stack = list(states)
        seen = set(states)
        while stack:
            for nxt in self._eps[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return frozenset(seen)

    def step(self, state: frozenset, cls: str) -> frozenset:
        key = (state, cls)
        nxt = self._next.get(key)
        if nxt is None:
            targets = {dst for s in state for syms, dst in self._moves[s] if cls in syms}
            nxt = self._closure(targets) if targets else frozenset()
            self._next[key] = nxt
        return nxt

    def accepts(self, state: frozenset) -> bool:
        return self._accept in state


_RANGE_STARTS: list[int] = []
_RANGE_ENDS: list[int] = []
_RANGE_NAMES: list[str] = []
for _lo, _hi, _name in sorted((lo, hi, name) for name, rs in _CLASSES.items() for lo, hi in rs):
    _RANGE_STARTS.append(_lo)
    _RANGE_ENDS.append(_hi)
    _RANGE_NAMES.append(_name)
_dfa: _DFA | None = None


def char_class(ch: str) -> str:
    """The word-break class Lucene's tokenizer gives a character (``"OTHER"`` if none).

    >>> [char_class(c) for c in "a1.,:_ ' 中😀"]
    ['AL', 'DIG', 'MNL', 'MN', 'ML', 'EN', 'OTHER', 'SQ', 'OTHER', 'HAN', 'EC']
    """
    cp = ord(ch)
    i = bisect.bisect_right(_RANGE_STARTS, cp) - 1
    if i >= 0 and cp <= _RANGE_ENDS[i]:
        return _RANGE_NAMES[i]
    return "OTHER"


def exact_tokens(text: str) -> list[str]:
    """StandardTokenizer's tokens by longest match, with its 255-unit scanning window.

    >>> exact_tokens("a" * 600) == ["a" * 255, "a" * 255, "a" * 90]
    True
    >>> [len(t) for t in exact_tokens("a" * 254 + ".b")]  # "." needs the letter after it
    [254, 1]
    >>> [[hex(ord(c)) for c in t] for t in exact_tokens(chr(0x1F468) + chr(0x200D) + chr(0x1F469) + "x")]
    [['0x1f468', '0x200d', '0x1f469'], ['0x78']]
    """
    global _dfa
    if _dfa is None:
        _dfa = _DFA(_grammar())
    dfa = _dfa
    classes = [char_class(c) for c in text]
    units = [2 if c > "\uffff" else 1 for c in text]
    tokens = []
    n = len(text)
    i = 0
    while i < n:
        state = dfa.start
        budget = MAX_TOKEN_LENGTH
        best = -1
        j = i
        while j < n and units[j] <= budget:
            budget -= units[j]
            state = dfa.step(state, classes[j])
            if not state:
                break
            j += 1
            if dfa.accepts(state):
                best = j
        if best > i:
            tokens.append(text[i:best])
            i = best
        else:
            i += 1
    return tokens


def tokenize(text: str) -> list[str]:
    """Lucene 9 ``StandardTokenizer`` (max token length 255) on ``text``: the surface tokens.

    >>> tokenize("U.S.A. 10.2.3 dogs' e-mail 1,000.5")
    ['U.S.A', '10.2.3', 'dogs', 'e', 'mail', '1,000.5']
    """
    tokens = _fast_tokens(text)
    for tok in tokens:
        if len(tok) > MAX_TOKEN_LENGTH or _RARE_SEARCH(tok):
            return exact_tokens(text)
    return tokens


# ASCII punctuation that can never be part of a token when it stands at either end of a chunk:
# mid-word marks (. , : ; ') need a letter or digit on both sides, "#" and "*" start a token only
# before U+20E3, '"' joins only Hebrew letters.  "_" (ExtendNumLet) is kept: it joins.
EDGE_PUNCTUATION = "".join(c for c in map(chr, range(0x21, 0x7F)) if not c.isalnum() and c != "_")


def chunk_tokens(chunk: str) -> list[str]:
    """``tokenize`` for text without whitespace, with a shortcut for plain ASCII words.

    >>> chunk_tokens("(patients),"), chunk_tokens("TNF-alpha;"), chunk_tokens("--")
    (['patients'], ['TNF', 'alpha'], [])
    """
    if chunk.isascii():
        core = chunk.strip(EDGE_PUNCTUATION)
        if core.isalnum() and len(core) <= MAX_TOKEN_LENGTH:
            return [core]
        if len(chunk) <= MAX_TOKEN_LENGTH:
            return _fast_tokens(chunk)
        return exact_tokens(chunk)
    if len(chunk) > MAX_TOKEN_LENGTH or _RARE_SEARCH(chunk):
        return exact_tokens(chunk)
    return _fast_tokens(chunk)
