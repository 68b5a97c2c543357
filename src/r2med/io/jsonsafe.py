"""``loads``: ``json.loads`` whose failures past Python's limits are plain ``ValueError``s with a readable reason.

Speed: a line is first read by msgspec's JSON decoder (about 2.5x faster than ``json``); where msgspec refuses it
(NaN and Infinity, lone surrogate escapes, numbers out of float range, malformed JSON) or the text may nest deeper
than the guard below, ``json.loads`` reads it, so what is accepted, what it becomes and every error are ``json``'s.
Where msgspec accepts, it gives what ``json`` gives: the same objects, big integers exact, the last of duplicate
keys, correctly rounded floats (``tests/io`` and ``tests/datasets`` run every reader test with and without it).

``json.loads`` raises ``ValueError("Exceeds the limit (4300 digits) for integer string conversion ...")`` for an
integer with too many digits and ``RecursionError`` for deeply nested arrays or objects. Readers that turn a
bad line into ``file:line: <reason>`` catch :class:`JSONLimitError` (a ``ValueError``, so code that already
catches ``ValueError`` for malformed JSON keeps working) and never see a ``RecursionError``.

>>> loads('{"a": [1, 2]}')
{'a': [1, 2]}
>>> loads("[" * 100_000 + "]" * 100_000)
Traceback (most recent call last):
...
r2med.io.jsonsafe.JSONLimitError: JSON nested too deeply to read (more levels than Python's recursion limit)
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

try:
    import msgspec
except ImportError:  # pragma: no cover - a core dependency; json alone reads the same, slower
    msgspec = None

#: the fast decoder (None: json only; the tests switch it off to run the readers on json alone)
_FAST: Callable[[str | bytes], Any] | None = msgspec.json.Decoder().decode if msgspec is not None else None
_FAST_REFUSALS: tuple[type[BaseException], ...] = (msgspec.MsgspecError, RecursionError) if msgspec is not None else ()
#: msgspec is tried only when the text has at most this many '[' and '{' (an upper bound on its nesting), so that a
#: document nested deeper than json's recursion limit is always refused as json refuses it
_FAST_MAX_OPENINGS = 64


class JSONLimitError(ValueError):
    """Valid JSON that Python cannot read: an integer past the digit limit, or nesting past the recursion limit."""


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; :class:`JSONLimitError` for input past Python's limits, ``json.JSONDecodeError`` otherwise."""
    fast = _FAST  # bytes go to json alone: its detection of UTF-16 and UTF-32 applies
    if fast is not None and type(text) is str and text.count("[") + text.count("{") <= _FAST_MAX_OPENINGS:
        with contextlib.suppress(*_FAST_REFUSALS):  # msgspec refuses: json decides below (and words the error)
            return fast(text)
    try:
        return json.loads(text)
    except RecursionError:
        raise JSONLimitError("JSON nested too deeply to read (more levels than Python's recursion limit)") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if "limit" not in str(exc) or "digits" not in str(exc):
            raise
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise JSONLimitError(f"an integer with more than {limit} digits (Python's limit for reading integers)") from None
