"""sliding_windows and apply_permutation: worked-out windows for every shape that matters, plus properties."""

from __future__ import annotations

import itertools
import random

import pytest

from r2med.errors import UsageError
from r2med.rerankers.windows import apply_permutation, sliding_windows


@pytest.mark.parametrize(
    ("n", "window", "stride", "expected"),
    [
        # RankGPT's standard setting on a top 100: 9 windows, 20 wide, ends 100, 90, ..., 20
        (100, 20, 10, [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50), (20, 40), (10, 30), (0, 20)]),
        # top 10 / top 20 fit in one window
        (10, 20, 10, [(0, 10)]),
        (20, 20, 10, [(0, 20)]),
        # one more than the window: 21 - 20 = 1, then end 11 -> start max(0, -9) = 0
        (21, 20, 10, [(1, 21), (0, 11)]),
        # 25: (5, 25), then end 15 -> clipped (0, 15); RankGPT's loop would stop after (5, 25)
        (25, 20, 10, [(5, 25), (0, 15)]),
        # 30 = window + stride: exactly two windows, no redundant third starting at 0
        (30, 20, 10, [(10, 30), (0, 20)]),
        # 40: ends 40, 30, 20 -> starts 20, 10, 0
        (40, 20, 10, [(20, 40), (10, 30), (0, 20)]),
        (1, 20, 10, [(0, 1)]),
        (0, 20, 10, []),
        # stride == window: no overlap; 10 = 4 + 4 + 2
        (10, 4, 4, [(6, 10), (2, 6), (0, 2)]),
        # window 1: every item its own window
        (3, 1, 1, [(2, 3), (1, 2), (0, 1)]),
        # stride 1: ends 6, 5, 4 -> starts 3, 2, 1, then 0 at end 3
        (6, 3, 1, [(3, 6), (2, 5), (1, 4), (0, 3)]),
        # window 10 stride 5 over a top 20 (the listwise server test uses this one)
        (20, 10, 5, [(10, 20), (5, 15), (0, 10)]),
    ],
)
def test_back_to_front(n, window, stride, expected):
    assert sliding_windows(n, window, stride) == expected


@pytest.mark.parametrize(
    ("n", "window", "stride", "expected"),
    [
        (100, 20, 10, [(0, 20), (10, 30), (20, 40), (30, 50), (40, 60), (50, 70), (60, 80), (70, 90), (80, 100)]),
        (25, 20, 10, [(0, 20), (10, 25)]),
        (20, 20, 10, [(0, 20)]),
        (5, 20, 10, [(0, 5)]),
        (0, 20, 10, []),
        (10, 4, 4, [(0, 4), (4, 8), (8, 10)]),
    ],
)
def test_front_to_back(n, window, stride, expected):
    assert sliding_windows(n, window, stride, direction="front_to_back") == expected


@pytest.mark.parametrize(
    ("window", "stride", "direction", "message"),
    [
        (0, 1, "back_to_front", "at least 1 passage"),
        (20, 0, "back_to_front", "stride must be between 1 and the window"),
        (20, 21, "back_to_front", "would skip passages"),
        (20, 10, "sideways", "unknown window direction 'sideways'"),
    ],
)
def test_bad_settings_are_usage_errors(window, stride, direction, message):
    with pytest.raises(UsageError, match=message):
        sliding_windows(10, window, stride, direction=direction)


def test_properties_over_many_shapes():
    """Every item is covered, windows are in bounds and at most `window` wide, consecutive windows overlap
    by window - stride (or end at the head), and no window is repeated."""
    for n in range(61):
        for window in range(1, 13):
            for stride in range(1, window + 1):
                for direction in ("back_to_front", "front_to_back"):
                    windows = sliding_windows(n, window, stride, direction=direction)
                    covered = {i for s, e in windows for i in range(s, e)}
                    assert covered == set(range(n))
                    assert all(0 <= s < e <= n and e - s <= window for s, e in windows)
                    assert len(set(windows)) == len(windows)
                    for (s1, e1), (s2, e2) in itertools.pairwise(windows):
                        if direction == "back_to_front":
                            assert e2 == e1 - stride and (s2 == s1 - stride or s2 == 0)
                        else:
                            assert s2 == s1 + stride and (e2 == e1 + stride or e2 == n)


def test_back_to_front_bubbles_the_best_item_to_the_top():
    """The point of RankGPT's direction: when the LLM always puts one item first, one pass brings it from any
    rank to rank 1, as long as consecutive windows overlap (stride < window)."""
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 100)
        window = rng.randint(2, 25)
        stride = rng.randint(1, window - 1)
        best = rng.randrange(n)
        order = list(range(n))
        for s, e in sliding_windows(n, window, stride):
            part = order[s:e]
            perm = sorted(range(e - s), key=lambda i: part[i] != best)  # best first, the rest in place
            order = apply_permutation(order, s, e, perm)
        assert order[0] == best
        assert sorted(order) == list(range(n))


def test_apply_permutation():
    # window (1, 4) of a b c d e holds b c d; permutation [2, 0, 1] puts d, b, c there
    assert apply_permutation(["a", "b", "c", "d", "e"], 1, 4, [2, 0, 1]) == ["a", "d", "b", "c", "e"]
    assert apply_permutation([], 0, 0, []) == []
    with pytest.raises(ValueError, match="not a permutation of range"):
        apply_permutation(["a", "b"], 0, 2, [1])
    with pytest.raises(ValueError, match="outside a list of 2 items"):
        apply_permutation(["a", "b"], 1, 3, [0, 1])
