"""``loads``: ``json.loads`` whose failures past Python's limits are plain ``ValueError``s with a readable reason.

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

import json
import sys
from typing import Any


class JSONLimitError(ValueError):
    """Valid JSON that Python cannot read: an integer past the digit limit, or nesting past the recursion limit."""


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; :class:`JSONLimitError` for input past Python's limits, ``json.JSONDecodeError`` otherwise."""
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
