"""Sliding windows for listwise reranking (RankGPT), and applying a window's permutation.

A listwise LLM sees ``window`` passages at a time. RankGPT slides the window from the back of the
list to the front with a step of ``stride``, so a relevant passage found low in the list can climb
by up to ``window - stride`` places per window and reach the top in one pass. Windows are applied
one after another: each works on the order left by the previous one.

Differences from RankGPT's loop (``while start >= rank_start``), all deliberate:

- a list shorter than the window gets one window over the whole list (RankGPT: none);
- the last window is clipped at the list's head so the head is always looked at
  (RankGPT on 25 passages with 20/10 reranks only ranks 6..25 and never the first five);
- no redundant window after one that already starts at the head (rank_llm's fix emits one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from r2med.errors import UsageError

T = TypeVar("T")

DIRECTIONS = ("back_to_front", "front_to_back")


def sliding_windows(n: int, window: int = 20, stride: int = 10, *, direction: str = "back_to_front") -> list[tuple[int, int]]:
    """Half-open ``(start, end)`` windows over ``n`` ranked items, in the order they are applied.

    ``back_to_front`` (RankGPT's default) starts at the tail; ``front_to_back`` at the head. Every
    item is in at least one window; consecutive windows overlap by ``window - stride``.

    >>> sliding_windows(100)
    [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50), (20, 40), (10, 30), (0, 20)]
    >>> sliding_windows(25), sliding_windows(20), sliding_windows(7), sliding_windows(0)
    ([(5, 25), (0, 15)], [(0, 20)], [(0, 7)], [])
    >>> sliding_windows(25, direction="front_to_back")
    [(0, 20), (10, 25)]
    >>> sliding_windows(10, window=4, stride=4)
    [(6, 10), (2, 6), (0, 2)]
    """
    if direction not in DIRECTIONS:
        raise UsageError(f"unknown window direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if window < 1:
        raise UsageError(f"the window must hold at least 1 passage, got {window}")
    if stride < 1 or stride > window:
        raise UsageError(
            f"the stride must be between 1 and the window ({window}), got {stride}; "
            "a stride larger than the window would skip passages"
        )
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    out: list[tuple[int, int]] = []
    if n == 0:
        return out
    if direction == "back_to_front":
        end = n
        while True:
            start = max(0, end - window)
            out.append((start, end))
            if start == 0:
                return out
            end -= stride
    start = 0
    while True:
        end = min(n, start + window)
        out.append((start, end))
        if end == n:
            return out
        start += stride


def apply_permutation(items: Sequence[T], start: int, end: int, permutation: Sequence[int]) -> list[T]:
    """A new list: ``items[start:end]`` reordered so that its ``i``-th item is the window's ``permutation[i]``-th.

    ``permutation`` must be a permutation of ``range(end - start)`` (``parse_permutation`` returns one).

    >>> apply_permutation(list("abcdef"), 2, 5, [2, 0, 1])
    ['a', 'b', 'e', 'c', 'd', 'f']
    >>> apply_permutation(list("abc"), 0, 3, [0, 0, 1])
    Traceback (most recent call last):
    ...
    ValueError: [0, 0, 1] is not a permutation of range(3)
    """
    size = end - start
    if not 0 <= start <= end <= len(items):
        raise ValueError(f"window ({start}, {end}) is outside a list of {len(items)} items")
    if sorted(permutation) != list(range(size)):
        raise ValueError(f"{list(permutation)} is not a permutation of range({size})")
    window = list(items[start:end])
    return [*items[:start], *(window[i] for i in permutation), *items[end:]]
