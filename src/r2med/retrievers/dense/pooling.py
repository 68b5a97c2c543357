"""Pooling: token states ``(batch, seq, dim)`` + attention mask ``(batch, seq)`` -> ``(batch, dim)``.

Small pure torch functions, one per mode the R2MED models use, written to give exactly what the
benchmark authors' code gives (``FlagDRESModel.pooling`` / ``HighScaleModel.pooling``):

- ``cls``: the first token's state (BGE, MedCPT);
- ``mean``: the attention-mask-weighted mean (Contriever, Instructor, GritLM);
- ``last``: the last non-padding token, for left or right padding (E5-Mistral, SFR, Qwen3-Embedding);
- ``last-bmr``: BMRetriever's variant, which zeroes padded positions before taking the last token.

torch is imported lazily, so importing this module never needs the ``dense`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from r2med.errors import UsageError
from r2med.hf import require

Tensor = Any  # torch.Tensor, kept out of the import graph


def cls(hidden: Tensor, mask: Tensor) -> Tensor:
    """The state of the first token (``[CLS]``), whatever the mask says.

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> h = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    >>> cls(h, torch.tensor([[1, 1], [1, 0]])).tolist()
    [[1.0, 2.0], [5.0, 6.0]]
    """
    return hidden[:, 0]


def mean(hidden: Tensor, mask: Tensor) -> Tensor:
    """The mean of the states whose mask is 1 (an all-zero row gives zeros, not NaN).

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> mean(h, torch.tensor([[1, 1, 0]])).tolist()
    [[2.0, 3.0]]
    """
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    total = (hidden * weights).sum(dim=1)
    count = weights.sum(dim=1).clamp(min=1e-9)
    return total / count


def _last_index(hidden: Tensor, mask: Tensor) -> Tensor:
    torch = require("torch")
    # The authors' test: the batch is left-padded when every row's last position is a real token.
    if bool(mask[:, -1].sum() == mask.shape[0]):
        return hidden[:, -1]
    lengths = mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths]


def last(hidden: Tensor, mask: Tensor) -> Tensor:
    """The state of the last real token: position -1 under left padding, else ``length - 1``.

    Left padding (row 0 padded at the front):

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> h = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]], [[3.0, 3.0], [4.0, 4.0], [5.0, 5.0]]])
    >>> last(h, torch.tensor([[0, 1, 1], [1, 1, 1]])).tolist()
    [[2.0, 2.0], [5.0, 5.0]]

    Right padding (row 0 padded at the end):

    >>> last(h, torch.tensor([[1, 1, 0], [1, 1, 1]])).tolist()
    [[1.0, 1.0], [5.0, 5.0]]
    """
    return _last_index(hidden, mask)


def last_bmr(hidden: Tensor, mask: Tensor) -> Tensor:
    """BMRetriever's last-token pooling: padded states are zeroed first, then ``last``.

    The same as ``last`` whenever the mask is a proper left or right padding; it differs only
    where ``last`` would read a padded position (then this gives zeros).

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> h = torch.tensor([[[7.0, 7.0], [1.0, 1.0], [2.0, 2.0]], [[3.0, 3.0], [4.0, 4.0], [5.0, 5.0]]])
    >>> last_bmr(h, torch.tensor([[0, 1, 1], [1, 1, 1]])).tolist()
    [[2.0, 2.0], [5.0, 5.0]]
    >>> last_bmr(h, torch.tensor([[1, 1, 0], [1, 1, 1]])).tolist()
    [[1.0, 1.0], [5.0, 5.0]]
    """
    zeroed = hidden.masked_fill(~mask[..., None].bool(), 0.0)
    return _last_index(zeroed, mask)


def l2_normalize(vectors: Tensor) -> Tensor:
    """Rows scaled to unit L2 norm (zero rows stay zero), as ``torch.nn.functional.normalize``.

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> l2_normalize(torch.tensor([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    return require("torch").nn.functional.normalize(vectors, p=2, dim=-1)


def exclude_prefix(mask: Tensor, n: int) -> Tensor:
    """A copy of ``mask`` with the first ``n`` real tokens of every row set to 0.

    How an instruction is kept out of mean pooling (Instructor, GritLM): the instruction is part
    of the input, but its tokens do not count in the mean. Works for left and right padding.

    >>> import pytest; torch = pytest.importorskip("torch")
    >>> exclude_prefix(torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]]), 2).tolist()
    [[0, 0, 1, 0], [0, 0, 0, 1]]
    """
    torch = require("torch")
    out = mask.clone()
    if n <= 0:
        return out
    positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
    starts = (mask.shape[1] - mask.sum(dim=1, keepdim=True)) * (mask[:, :1] == 0)  # left-pad offset
    out[positions < starts + n] = 0
    return out


POOLERS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "cls": cls,
    "mean": mean,
    "last": last,
    "last-bmr": last_bmr,
}


def pool(method: str, hidden: Tensor, mask: Tensor) -> Tensor:
    """Apply the pooling called ``method`` (one of ``POOLERS``)."""
    try:
        fn = POOLERS[method]
    except KeyError:
        raise UsageError(f"unknown pooling '{method}'; valid: {', '.join(POOLERS)}") from None
    return fn(hidden, mask)
