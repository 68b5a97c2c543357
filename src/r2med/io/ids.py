"""The one rule for query and document ids, checked by every loader and by ``r2med datasets validate``.

An id must fit in one field of a TREC run line (``qid Q0 docid rank score tag``) and come back from it
unchanged, and must reach pytrec_eval (a C library) whole. So an id is rejected when it is empty or holds
any character that

- ``str.isspace()`` calls white space (space, tab, newline, carriage return, NBSP U+00A0, U+3000, ...):
  a TREC line splits there;
- is a Unicode control character (category Cc: NUL, the other C0 controls, DEL, the C1 controls): NUL
  ends the id inside pytrec_eval (a document id ``d1\\x00x`` is judged as ``d1``), the others are
  invisible or break lines;
- is a format character (Cf: zero-width space U+200B, BOM U+FEFF, ...): invisible, so two ids that look
  equal differ;
- is a separator (Zs, Zl, Zp: U+2028, U+2029 and every space) or a lone surrogate (Cs, from a JSON
  ``\\ud800`` escape; it cannot be written as UTF-8).

Letters of any script, digits, punctuation and symbols are kept: ``doc-1/2#x``, ``Ärztin``, ``病例1``.

>>> id_problem("doc-1/2#x") is None, id_problem("病例1") is None
(True, True)
>>> id_problem("doc A")
'contains white space U+0020 (SPACE) at character 4'
>>> id_problem("d1\\x00x")
'contains a control character U+0000 (NUL) at character 3'
>>> id_problem("d\\u200b1")
'contains an invisible format character U+200B (ZERO WIDTH SPACE) at character 2'
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from r2med.io.problems import Problems

_KINDS = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "a lone surrogate",
    "Zs": "white space",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
#: names unicodedata does not give (controls have none)
_CONTROL_NAMES = {"\x00": "NUL", "\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x0b": "VERTICAL TAB",
                  "\x0c": "FORM FEED", "\x7f": "DELETE", "\x85": "NEXT LINE"}
#: what every rejection message says about the fix
ID_RULE = ("a TREC run line cannot hold it. Ids must be non-empty and contain no white space, control, "
           "format or separator characters")


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (``'is empty'``, ``'contains ... at character N'``), or ``None`` when it can.

    >>> id_problem(""), id_problem("a\\u2028b"), id_problem("a\\u00a0b")
    ('is empty', 'contains white space U+2028 (LINE SEPARATOR) at character 2', 'contains white space U+00A0 (NO-BREAK SPACE) at character 2')
    """
    if not value:
        return "is empty"
    if value.isprintable() and " " not in value:  # fast path: isprintable() is False for every rejected class
        return None
    for position, char in enumerate(value, start=1):
        category = unicodedata.category(char)
        if char.isspace() or category in _KINDS:
            kind = "white space" if char.isspace() else _KINDS[category]
            name = unicodedata.name(char, "") or _CONTROL_NAMES.get(char, "")
            label = f"U+{ord(char):04X}" + (f" ({name})" if name else "")
            return f"contains {kind} {label} at character {position}"
    return None  # private-use or unassigned code points: a TREC line holds them


def check_id(value: str, *, field: str, path: str, line: int | None, problems: Problems) -> str | None:
    """``value`` when it is a valid id; otherwise an error naming file:line, the field, the id (repr) and the fix.

    >>> p = Problems()
    >>> check_id("d 1", field="p_id", path="qrels.tsv", line=4, problems=p) is None
    True
    >>> print(p.errors[0])  # doctest: +NORMALIZE_WHITESPACE
    qrels.tsv:4: field 'p_id' 'd 1' contains white space U+0020 (SPACE) at character 2; a TREC run line cannot
    hold it. Ids must be non-empty and contain no white space, control, format or separator characters: fix
    the id in the file (remove the character or replace it, e.g. with '_')
    """
    problem = id_problem(value)
    if problem is None:
        return value
    problems.error(path, line, f"field '{field}' {value!r} {problem}; {ID_RULE}: fix the id in the file "
                               "(remove the character or replace it, e.g. with '_')")
    return None


def first_bad_id(ids: Iterable[str]) -> tuple[str, str] | None:
    """``(id, problem)`` of the first id that breaks the rule, or ``None``.

    >>> first_bad_id(["a", "b c", "d"])
    ('b c', 'contains white space U+0020 (SPACE) at character 2')
    """
    for value in ids:
        if not value or not value.isprintable() or " " in value:
            problem = id_problem(value)
            if problem is not None:
                return value, problem
    return None
