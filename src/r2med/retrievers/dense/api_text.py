"""Text side of the embedding APIs: token counting, truncation, batching, the official text quirk.

Pure helpers, no network. Token counts use ``tiktoken`` when it is installed and knows the model
(OpenAI models); otherwise they are estimated at 3 characters per token, which over-counts typical
English (about 4 characters per token), so truncation and request budgets err on the safe side. A
text made mostly of digits, symbols or non-Latin script can still exceed a server's limit, in
which case the server's message is reported.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any, Protocol

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3


class TokenCounter(Protocol):
    """Counts and cuts tokens; ``name`` goes into cache keys because it decides where texts are cut."""

    name: str

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


class CharEstimate:
    """``ceil(len / 3)`` tokens; cutting keeps the first ``3 * max_tokens`` characters.

    >>> counter = CharEstimate()
    >>> counter.count("abcdefg"), counter.truncate("abcdefg", 2), counter.name
    (3, 'abcdef', 'chars/3')
    """

    def __init__(self, chars_per_token: int = CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"chars/{chars_per_token}"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def truncate(self, text: str, max_tokens: int) -> str:
        return text[: max_tokens * self.chars_per_token]


class TiktokenCounter:
    """Exact counts with a ``tiktoken`` encoding (special-token text is treated as plain text)."""

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def truncate(self, text: str, max_tokens: int) -> str:
        return self._encoding.decode(self._encoding.encode(text, disallowed_special=())[:max_tokens])


def token_counter(model: str, *, use_tiktoken: bool) -> TokenCounter:
    """``tiktoken``'s encoding for ``model`` when asked for, installed and known; else ``CharEstimate``.

    >>> token_counter("voyage-3", use_tiktoken=False).name
    'chars/3'
    """
    if not use_tiktoken:
        return CharEstimate()
    try:
        import tiktoken
    except ImportError:
        return CharEstimate()
    try:
        encoding = tiktoken.encoding_for_model(model)
    except KeyError:  # not an OpenAI model name (a vLLM / TEI server's model)
        return CharEstimate()
    except Exception as exc:  # noqa: BLE001 - the encoding file could not be fetched (offline) or read
        logger.warning(
            "tiktoken could not load the encoding for %s (%s); estimating %d characters per token instead",
            model, type(exc).__name__, CHARS_PER_TOKEN,
        )
        return CharEstimate()
    return TiktokenCounter(encoding)


def split_batches(costs: Sequence[int], *, max_count: int, max_tokens: int | None = None) -> list[range]:
    """Consecutive index ranges with at most ``max_count`` items and ``max_tokens`` summed cost each.

    Order is kept, so concatenating the batches' results gives the input order back. An item whose
    own cost exceeds ``max_tokens`` goes alone into a batch (the server will say if it is too big).

    >>> split_batches([1, 1, 1, 1, 1], max_count=2)
    [range(0, 2), range(2, 4), range(4, 5)]
    >>> split_batches([5, 5, 20, 1, 1], max_count=10, max_tokens=10)
    [range(0, 2), range(2, 3), range(3, 5)]
    >>> split_batches([], max_count=3)
    []
    """
    if max_count < 1:
        raise ValueError(f"max_count must be at least 1, got {max_count}")
    batches: list[range] = []
    start, total = 0, 0
    for i, cost in enumerate(costs):
        full = i - start >= max_count or (max_tokens is not None and i > start and total + cost > max_tokens)
        if full:
            batches.append(range(start, i))
            start, total = i, 0
        total += cost
    if start < len(costs):
        batches.append(range(start, len(costs)))
    return batches


def r2med_text(text: str) -> str:
    """The text exactly as the official R2MED code sent it to OpenAI and Voyage.

    It replaced newlines by spaces and then sent ``json.dumps`` of the result: wrapped in double
    quotes, with quotes and backslashes escaped and every non-ASCII character written as ``\\uXXXX``.
    Offered as ``preprocess="r2med"`` to reproduce the published numbers; ``"plain"`` sends the text.

    >>> print(r2med_text('line one\\nsays "hi" to caf\\u00e9'))
    "line one says \\"hi\\" to caf\\u00e9"
    """
    return json.dumps(text.replace("\n", " "))
