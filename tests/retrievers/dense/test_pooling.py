"""Pooling modes against hand-computed results on tiny tensors, left and right padding."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from r2med.errors import UsageError
from r2med.retrievers.dense import pooling

# Two sequences of 4 positions, 2 dims; values chosen so every position is distinguishable.
HIDDEN = torch.tensor(
    [
        [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]],
        [[5.0, 50.0], [6.0, 60.0], [7.0, 70.0], [8.0, 80.0]],
    ]
)
RIGHT = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])  # row 0: 2 real tokens, then padding
LEFT = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])  # row 0: padding, then 2 real tokens


def test_cls_takes_position_zero_whatever_the_padding():
    assert pooling.cls(HIDDEN, RIGHT).tolist() == [[1.0, 10.0], [5.0, 50.0]]
    # Under left padding position 0 is a pad: CLS pooling is only meant for right-padded encoders.
    assert pooling.cls(HIDDEN, LEFT).tolist() == [[1.0, 10.0], [5.0, 50.0]]


def test_mean_weights_by_the_mask():
    assert pooling.mean(HIDDEN, RIGHT).tolist() == [[1.5, 15.0], [6.5, 65.0]]
    assert pooling.mean(HIDDEN, LEFT).tolist() == [[3.5, 35.0], [6.5, 65.0]]


def test_mean_of_an_empty_row_is_zero_not_nan():
    out = pooling.mean(HIDDEN, torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0]]))
    assert out.tolist() == [[0.0, 0.0], [5.0, 50.0]]


def test_last_right_padding_takes_length_minus_one():
    assert pooling.last(HIDDEN, RIGHT).tolist() == [[2.0, 20.0], [8.0, 80.0]]


def test_last_left_padding_takes_the_final_position():
    assert pooling.last(HIDDEN, LEFT).tolist() == [[4.0, 40.0], [8.0, 80.0]]


def test_last_bmr_equals_last_on_proper_padding():
    for mask in (LEFT, RIGHT):
        assert pooling.last_bmr(HIDDEN, mask).tolist() == pooling.last(HIDDEN, mask).tolist()


def test_last_bmr_zeroes_what_last_reads_from_padding():
    # Not a proper padding: the right-padding arithmetic (sum - 1 = 0) points at position 0, a pad.
    odd = torch.tensor([[0, 1, 0, 0], [1, 1, 1, 1]])
    assert pooling.last(HIDDEN, odd).tolist() == [[1.0, 10.0], [8.0, 80.0]]
    assert pooling.last_bmr(HIDDEN, odd).tolist() == [[0.0, 0.0], [8.0, 80.0]]


def test_l2_normalize():
    out = pooling.l2_normalize(torch.tensor([[3.0, 4.0], [0.0, 2.0]]))
    assert torch.allclose(out, torch.tensor([[0.6, 0.8], [0.0, 1.0]]))


def test_exclude_prefix_right_and_left():
    assert pooling.exclude_prefix(RIGHT, 1).tolist() == [[0, 1, 0, 0], [0, 1, 1, 1]]
    assert pooling.exclude_prefix(LEFT, 1).tolist() == [[0, 0, 0, 1], [0, 1, 1, 1]]
    assert pooling.exclude_prefix(LEFT, 0).tolist() == LEFT.tolist()
    # mean over the instruction-free part
    assert pooling.mean(HIDDEN, pooling.exclude_prefix(RIGHT, 1)).tolist() == [[2.0, 20.0], [7.0, 70.0]]


def test_pool_dispatch_and_unknown_mode():
    assert pooling.pool("last-bmr", HIDDEN, LEFT).tolist() == [[4.0, 40.0], [8.0, 80.0]]
    with pytest.raises(UsageError, match="unknown pooling 'max'"):
        pooling.pool("max", HIDDEN, LEFT)
