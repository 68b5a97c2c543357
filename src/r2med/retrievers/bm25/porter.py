"""The Porter stemmer exactly as Lucene's ``PorterStemFilter`` applies it.

Lucene ships Martin Porter's original algorithm (Release 3 of his Java version), not the later
Snowball "English" stemmer and not NLTK's default mode.  The details that set it apart:

- words of one or two characters are left alone;
- step 1 drops a final ``s`` unless the word ends in ``ss`` (so ``"gas" -> "ga"``,
  ``"this" -> "thi"``), maps ``sses -> ss`` and ``ies -> i``;
- the double-suffix step (Porter's step 2, Lucene's ``step3``) carries Porter's own later
  departures ``bli -> ble`` (instead of ``abli -> able``) and ``logi -> log``;
- within a group of suffixes the first suffix that matches ends the step, whether or not the
  stem was long enough to replace it;
- every character but ``a e i o u`` is a consonant (digits, accented letters and all), except
  that ``y`` is a vowel when it follows a consonant;
- Java works on UTF-16 code units, so a character outside the BMP counts as two consonants.

All functions are pure; :func:`stem` is the entry point. It stems an ASCII word with BM25's C kernel where it
was built (``stem_ascii``, ``csrc/bm25/porter.c``: these same steps; tested equal on every word of the parity corpora and
on generated ones), any other word here.
"""

from __future__ import annotations

from r2med.retrievers.bm25 import kernel

__all__ = ["stem"]

# consonant / vowel marks for ASCII; everything else is a consonant.
_CV_ASCII = {c: "c" for c in range(128)}
_CV_ASCII.update({ord(v): "v" for v in "aeiou"})
_CV_ASCII[ord("y")] = "y"


class _CVTable(dict):
    """``str.translate`` table: ASCII from the dict, any other character is a consonant."""

    def __missing__(self, key: int) -> str:
        return "c"


_CV = _CVTable(_CV_ASCII)

_STEP3 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP4 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_STEP5 = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def consonant_map(word: str) -> str:
    """Mark each character of ``word`` as consonant ``c`` or vowel ``v``.

    >>> consonant_map("toy")
    'cvc'
    >>> consonant_map("syzygy")
    'cvcvcv'
    >>> consonant_map("yay")
    'cvc'
    """
    cv = word.translate(_CV)
    if "y" not in cv:
        return cv
    out = list(cv)
    for i, mark in enumerate(out):
        if mark == "y":
            out[i] = "c" if i == 0 or out[i - 1] == "v" else "v"
    return "".join(out)


def measure(cv: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in a consonant map.

    >>> [measure(consonant_map(w)) for w in ("tr", "ee", "tree", "trouble", "oats", "troubles", "private")]
    [0, 0, 0, 1, 1, 2, 2]
    """
    return cv.count("vc")


def _ends_cvc(word: str, cv: str) -> bool:
    """True if ``word`` ends consonant-vowel-consonant, the last not w, x or y."""
    return cv[-3:] == "cvc" and word[-1] not in "wxy"


def _marks(replacement: str) -> str:
    # replacement suffixes hold no "y", so their marks do not depend on what precedes them
    return replacement.translate(_CV)


# (suffix, replacement, replacement's consonant map) per dispatch character
_STEP3_RULES = {k: tuple((s, r, _marks(r)) for s, r in rules) for k, rules in _STEP3.items()}
_STEP4_RULES = {k: tuple((s, r, _marks(r)) for s, r in rules) for k, rules in _STEP4.items()}


def _replace_first(w: str, cv: str, rules: tuple[tuple[str, str, str], ...]) -> tuple[str, str]:
    """Apply the first rule whose suffix ``w`` ends with, if its stem has m > 0."""
    for suffix, repl, repl_cv in rules:
        if w.endswith(suffix):
            stem_len = len(w) - len(suffix)
            if cv[:stem_len].count("vc") > 0:
                return w[:stem_len] + repl, cv[:stem_len] + repl_cv
            break
    return w, cv


def _stem_utf16(w: str) -> str:
    """Porter's steps on a lower-cased word of UTF-16 units; ``cv`` tracks its consonant map.

    A prefix's consonant map never depends on what follows it, so ``cv`` is computed once and
    then only cut or extended along with the word.
    """
    if len(w) <= 2:
        return w
    cv = consonant_map(w)
    # step 1: plurals, -ed, -ing
    if w[-1] == "s":
        if w.endswith(("sses", "ies")):
            w, cv = w[:-2], cv[:-2]
        elif w[-2] != "s":
            w, cv = w[:-1], cv[:-1]
    if w.endswith("eed"):
        if cv[:-3].count("vc") > 0:
            w, cv = w[:-1], cv[:-1]
    elif (w.endswith("ed") and "v" in cv[:-2]) or (w.endswith("ing") and "v" in cv[:-3]):
        cut = 2 if w[-1] == "d" else 3
        w, cv = w[:-cut], cv[:-cut]
        if w.endswith(("at", "bl", "iz")):
            w, cv = w + "e", cv + "v"
        elif len(w) >= 2 and w[-1] == w[-2] and cv[-1] == "c":
            if w[-1] not in "lsz":
                w, cv = w[:-1], cv[:-1]
        elif cv.count("vc") == 1 and _ends_cvc(w, cv):
            w, cv = w + "e", cv + "v"
    # step 2: y -> i after a vowel somewhere before it
    if w[-1] == "y" and "v" in cv[:-1]:
        w, cv = w[:-1] + "i", cv[:-1] + "v"
    # steps 3 and 4: double suffixes, then -ic-, -full, -ness; replaced when the stem has m > 0
    if len(w) > 1:
        w, cv = _replace_first(w, cv, _STEP3_RULES.get(w[-2], ()))
    w, cv = _replace_first(w, cv, _STEP4_RULES.get(w[-1], ()))
    # step 5: -ant, -ence, ... removed when the stem has m > 1
    if len(w) > 1:
        for suffix in _STEP5.get(w[-2], ()):
            if w.endswith(suffix):
                stem_len = len(w) - len(suffix)
                if suffix == "ion" and (stem_len == 0 or w[stem_len - 1] not in "st"):
                    continue
                if cv[:stem_len].count("vc") > 1:
                    w, cv = w[:stem_len], cv[:stem_len]
                break
    # step 6: final -e, and -ll -> -l, when m > 1
    m = cv.count("vc")
    if w[-1] == "e" and (m > 1 or m == 1 and not _ends_cvc(w[:-1], cv[:-1])):
        w, cv = w[:-1], cv[:-1]
    if w[-1] == "l" and len(w) >= 2 and w[-2] == "l" and cv[-1] == "c" and m > 1:
        w = w[:-1]
    return w


def stem(word: str) -> str:
    """Stem one lower-cased token the way Lucene's ``PorterStemFilter`` does.

    >>> [stem(w) for w in ("caresses", "ponies", "ties", "cats", "feed", "agreed", "plastered")]
    ['caress', 'poni', 'ti', 'cat', 'feed', 'agre', 'plaster']
    >>> [stem(w) for w in ("hopping", "falling", "filing", "happy", "relational", "generalization")]
    ['hop', 'fall', 'file', 'happi', 'relat', 'gener']
    >>> [stem(w) for w in ("gas", "this", "is", "news", "analysis", "3.5mg", "ion")]
    ['ga', 'thi', 'is', 'new', 'analysi', '3.5mg', 'ion']
    """
    if word.isascii():
        native = kernel.native
        return _stem_utf16(word) if native is None else native.stem_ascii(word)
    if max(word) <= "\uffff":
        return _stem_utf16(word)
    # Java sees a supplementary character as a surrogate pair: stem that form, then rejoin.
    units = "".join(c if c <= "\uffff" else _surrogate_pair(ord(c)) for c in word)
    return _stem_utf16(units).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _surrogate_pair(cp: int) -> str:
    cp -= 0x10000
    return chr(0xD800 + (cp >> 10)) + chr(0xDC00 + (cp & 0x3FF))
