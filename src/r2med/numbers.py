"""The one grammar of numbers read from files and typed by users: the reference tool's, never Python's.

trec_eval reads a run's score with C ``atof`` (``strtod``) and a qrels grade with ``atol``. Python's ``float()`` and
``int()`` read more: ``float("0_9")`` is 9.0, ``float("١٢")`` (Arabic-Indic digits) is 12.0, ``int("1_0")`` is 10,
so a file trec_eval reads one way would be scored another way without a word. Here a number is what ``strtod``
(``strtol`` for a grade) reads *whole* in the C locale, ASCII only:

- a score (:func:`parse_decimal`): optional ASCII white space, an optional sign, then decimal digits with at most
  one ``.`` and at least one digit, an optional exponent ``e``/``E`` [sign] digits; or a C99 hex float ``0x1.8p3``
  (strtod reads it, so trec_eval does: it is read as strtod reads it, with :meth:`float.fromhex`); or ``inf``,
  ``infinity``, ``nan``, ``nan(chars)`` (any case). No underscores, no non-ASCII digits, no trailing text (atof would
  read ``0.9abc`` as 0.9 and drop the rest: refused here). White space around the number is allowed.
- a grade (:func:`parse_integer`): optional white space, an optional sign, ASCII decimal digits.

A parsed score may still be infinite or NaN (``inf``, ``nan``, ``1e999``); :func:`parse_score` refuses those, since
every score must be finite. The property test in ``tests/io/test_number_grammar.py`` checks :func:`parse_decimal`
against the C library's own ``strtod`` on arbitrary text.
"""

from __future__ import annotations

import re

#: C's isspace() in the "C" locale
_SPACE = "[ \t\n\v\f\r]*"
_DEC = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_HEX = r"0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
_INF = r"[iI][nN][fF](?:[iI][nN][iI][tT][yY])?"
_NAN = r"[nN][aA][nN](?:\([0-9A-Za-z_]*\))?"

_DECIMAL = re.compile(rf"{_SPACE}(?P<sign>[+-]?)(?:(?P<hex>{_HEX})|(?P<dec>{_DEC})|(?P<inf>{_INF})|(?P<nan>{_NAN})){_SPACE}",
                      re.ASCII)
_INTEGER = re.compile(rf"{_SPACE}[+-]?[0-9]+{_SPACE}", re.ASCII)

#: what the messages tell a user to write
SCORE_FORM = "ASCII digits with an optional sign, '.' and exponent, e.g. 0.9, -12, 1.5e-3"
GRADE_FORM = "ASCII digits with an optional sign, e.g. 0, 1, 2"


class NumberError(ValueError):
    """A text that is not a number in the grammar; the message says what is wrong and what to write, ``hint`` the
    part in parentheses (what is wrong, what to write) alone."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def parse_decimal(text: str) -> float:
    """The value C ``strtod`` gives ``text`` when it reads all of it (white space around it aside), else NumberError.

    >>> parse_decimal("0.9"), parse_decimal(" -1.5E+2 "), parse_decimal(".5"), parse_decimal("3."), parse_decimal("0x1.8p1")
    (0.9, -150.0, 0.5, 3.0, 3.0)
    >>> parse_decimal("INF"), parse_decimal("-infinity"), parse_decimal("1e999")
    (inf, -inf, inf)
    >>> parse_decimal("0_9")
    Traceback (most recent call last):
    r2med.numbers.NumberError: '0_9' is not a number trec_eval reads (it holds '_'; write ASCII digits with an optional sign, '.' and exponent, e.g. 0.9, -12, 1.5e-3)
    >>> parse_decimal("١٢")
    Traceback (most recent call last):
    r2med.numbers.NumberError: '١٢' is not a number trec_eval reads (it holds the non-ASCII character '١' (U+0661); write ASCII digits with an optional sign, '.' and exponent, e.g. 0.9, -12, 1.5e-3)
    """
    match = _DECIMAL.fullmatch(text)
    if match is None:
        hint = f"{_why(text)}write {SCORE_FORM}"
        raise NumberError(f"{text!r:.60} is not a number trec_eval reads ({hint})", hint)
    sign = -1.0 if match["sign"] == "-" else 1.0
    if match["hex"] is not None:
        try:
            return sign * float.fromhex(match["hex"])
        except OverflowError:  # past the largest double: strtod gives HUGE_VAL (infinity)
            return sign * float("inf")
    if match["dec"] is not None:
        return sign * float(match["dec"])
    return sign * float("inf") if match["inf"] is not None else float("nan")


def parse_score(text: str) -> float:
    """A finite score: :func:`parse_decimal`, refusing infinity and NaN (and numbers past a double, ``1e999``).

    >>> parse_score("12.5")
    12.5
    >>> parse_score("nan")
    Traceback (most recent call last):
    r2med.numbers.NumberError: 'nan' is NaN; every score must be a finite number (fix or drop the line)
    >>> parse_score("1e999")
    Traceback (most recent call last):
    r2med.numbers.NumberError: '1e999' is infinite; every score must be a finite number (normalisation and fusion of an infinite score give NaN): fix or drop the line (past the largest double, 1.8e308)
    """
    value = parse_decimal(text)
    return check_finite(value, text)


def check_finite(value: float, shown: object) -> float:
    """``value``, or NumberError when it is NaN or infinite (``shown`` is what the file held)."""
    if value != value:
        raise NumberError(f"{shown!r:.60} is NaN; every score must be a finite number (fix or drop the line)")
    if value in (float("inf"), float("-inf")):
        past = "" if not isinstance(shown, str) or "inf" in shown.lower() else " (past the largest double, 1.8e308)"
        raise NumberError(f"{shown!r:.60} is infinite; every score must be a finite number "
                          f"(normalisation and fusion of an infinite score give NaN): fix or drop the line{past}")
    return value


def parse_integer(text: str) -> int:
    """The value C ``strtol`` gives ``text`` when it reads all of it (white space around it aside), else NumberError.

    >>> parse_integer("2"), parse_integer(" -1 "), parse_integer("+0")
    (2, -1, 0)
    >>> parse_integer("1_0")
    Traceback (most recent call last):
    r2med.numbers.NumberError: '1_0' is not an integer trec_eval reads (it holds '_'; write ASCII digits with an optional sign, e.g. 0, 1, 2)
    """
    if _INTEGER.fullmatch(text) is None:
        hint = f"{_why(text)}write {GRADE_FORM}"
        raise NumberError(f"{text!r:.60} is not an integer trec_eval reads ({hint})", hint)
    return int(text.strip(" \t\n\v\f\r"))


def _why(text: str) -> str:
    """What makes ``text`` no number, where one character says it ('' otherwise), ending in '; '."""
    for char in text:
        if not char.isascii():
            return f"it holds the non-ASCII character {char!r} (U+{ord(char):04X}); "
    if "_" in text:
        return "it holds '_'; "
    if not text.strip(" \t\n\v\f\r"):
        return "it is empty; "
    return ""
