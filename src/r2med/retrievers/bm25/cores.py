"""How many cores to use, and NumPy/SciPy work spread over threads (their kernels release the GIL)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from r2med.forking import usable_cores

__all__ = ["default_workers", "in_threads", "row_parts"]

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """The cores this process may use."""
    return usable_cores()


def in_threads(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(item) for item in items]``, on up to ``workers`` threads (default: every core).

    For NumPy and SciPy work that releases the GIL (element-wise arithmetic, sparse products, sorts).

    >>> in_threads(lambda x: x * x, [1, 2, 3], workers=2)
    [1, 4, 9]
    """
    workers = default_workers() if workers is None else max(1, workers)
    if workers == 1 or len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def row_parts(indptr: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Split the rows of a CSR matrix into ``parts`` row ranges ``(start, stop)`` of about equal entries.

    >>> row_parts(np.array([0, 5, 6, 7, 12]), 2)
    [(0, 2), (2, 4)]
    """
    n_rows = len(indptr) - 1
    if n_rows <= 0:
        return []
    cuts = np.searchsorted(indptr, np.linspace(0, indptr[-1], max(1, parts) + 1)[1:-1], side="right") - 1
    bounds = sorted({0, n_rows, *(int(c) for c in cuts.tolist() if 0 < c < n_rows)})
    return list(itertools.pairwise(bounds))
