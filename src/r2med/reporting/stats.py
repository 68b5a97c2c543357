"""Paired significance tests over per-query metric values, through scipy.

For two systems scored on the same queries (values paired by query id), ``paired_test`` computes:

- the mean difference ``mean(a - b)``;
- a paired randomization (permutation) test: ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"`` (each query's two values are swapped or not, i.e. the sign of its
  difference is flipped at random), statistic ``mean(a - b)``, two-sided. With ``2**n <= n_resamples``
  scipy enumerates every sign pattern (an exact test); otherwise it draws ``n_resamples`` of them;
- a paired t-test: ``scipy.stats.ttest_rel(a, b)``, two-sided;
- a confidence interval for the mean difference: ``scipy.stats.bootstrap((a, b), paired=True)``
  (queries are resampled with replacement, keeping each query's two values together), statistic
  ``mean(a - b)``, method BCa (bias-corrected and accelerated, scipy's default; ``ci_method`` may be
  ``"percentile"`` or ``"basic"``);
- wins / ties / losses: queries where ``a - b`` is > 0, == 0 (within 1e-12), < 0.

Every random draw comes from ``numpy.random.default_rng(seed)``, a fresh generator per test, so the
numbers do not depend on the order of the calls. scipy is given the resamples in batches of ``RESAMPLE_BATCH``:
it draws the same resamples in the same order whatever the batch, so the numbers are the ones one batch gives
(tests/reporting/test_stats.py compares them with scipy called without a batch), with memory O(batch x n) instead
of O(resamples x n): 10,000 resamples of 876 queries were 140 MB arrays, and the tests twice as slow. When every difference is zero (identical
systems) the tests are degenerate (the t statistic is 0/0): the result is then p = 1 for both
tests and the interval [0, 0], which is what the tests mean in the limit and what the
permutation test gives anyway. When every difference is the same non-zero value, the interval is
that value (every resample has that mean) and the t-test gives t = +-inf, p = 0, as scipy does.

:class:`PendingTests` runs many tests while its caller does other work (the report reads runs and draws while they
run): in a forked worker process (:mod:`r2med.forking`) when the tests are many and another core is free, else
here when their results are asked for. The numbers are the same either way (each test has its own generator); a
worker that dies is replaced by computing the tests here, with a warning.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from r2med.forking import fork_is_safe, forked_pool, stop_pool, usable_cores

logger = logging.getLogger(__name__)

#: Differences within this of zero count as ties.
TIE_TOLERANCE = 1e-12
#: resamples scipy handles per vectorised call (the numbers do not depend on it; see the module docstring)
RESAMPLE_BATCH = 1000
#: a :class:`PendingTests` of fewer paired values than this (over its tests) runs here: a worker would save little
#: (the R2MED-sized report compares 2 x 876 paired values; its tests, with scipy's import, take ~2 s of one core)
BACKGROUND_MIN_VALUES = 500


@dataclass(frozen=True)
class PairedTest:
    """The paired comparison of ``a`` with ``b`` over ``n`` queries (differences are ``a - b``)."""

    n: int
    mean_a: float
    mean_b: float
    mean_diff: float
    ci_low: float
    ci_high: float
    confidence: float
    permutation_p: float
    t_statistic: float
    t_p: float
    wins: int
    ties: int
    losses: int
    n_resamples: int
    seed: int
    ci_method: str

    def as_dict(self) -> dict[str, float | int | str]:
        return dict(self.__dict__)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``pvalues`` (family-wise error), in the input order.

    Sorted ascending, the i-th smallest (0-based) of m p-values becomes ``(m - i) * p``, made
    non-decreasing by a running maximum and capped at 1.

    >>> [round(p, 6) for p in holm([0.01, 0.04, 0.03])]
    [0.03, 0.06, 0.06]
    >>> [round(p, 6) for p in holm([0.2, 0.5, 0.001, 0.9])]
    [0.6, 1.0, 0.004, 1.0]
    >>> holm([])
    []
    """
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * float(pvalues[index])))
        adjusted[index] = running
    return adjusted


def mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """The statistic of every test here: ``mean(x - y)`` along ``axis`` (vectorised for scipy).

    >>> float(mean_difference(np.array([0.5, 1.0]), np.array([0.25, 0.25])))
    0.5
    """
    return np.mean(np.asarray(x) - np.asarray(y), axis=axis)


def _rng_kwarg(func: Callable) -> str:
    """scipy >= 1.15 takes ``rng``; older versions take ``random_state``."""
    return "rng" if "rng" in inspect.signature(func).parameters else "random_state"


def paired_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
    ci_method: str = "BCa",
) -> PairedTest:
    """Compare paired values ``a`` and ``b`` (same queries, same order); see the module docstring.

    >>> t = paired_test([0.5, 0.25, 1.0], [0.5, 0.25, 1.0])
    >>> t.mean_diff, t.permutation_p, t.t_p, (t.ci_low, t.ci_high), (t.wins, t.ties, t.losses)
    (0.0, 1.0, 1.0, (0.0, 0.0), (0, 3, 0))
    """
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired values need two 1-d sequences of the same length, got {x.shape} and {y.shape}")
    if len(x) < 2:
        raise ValueError(f"a paired test needs at least 2 queries, got {len(x)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    diff = x - y
    wins, losses = int(np.sum(diff > TIE_TOLERANCE)), int(np.sum(diff < -TIE_TOLERANCE))
    common = {"n": len(x), "mean_a": float(x.mean()), "mean_b": float(y.mean()), "confidence": confidence,
              "wins": wins, "ties": len(x) - wins - losses, "losses": losses, "n_resamples": n_resamples,
              "seed": seed, "ci_method": ci_method}
    if not np.any(diff):
        return PairedTest(mean_diff=0.0, ci_low=0.0, ci_high=0.0, permutation_p=1.0, t_statistic=0.0, t_p=1.0, **common)
    perm = stats.permutation_test(
        (x, y), mean_difference, permutation_type="samples", vectorized=True, n_resamples=n_resamples,
        alternative="two-sided", batch=RESAMPLE_BATCH, **{_rng_kwarg(stats.permutation_test): np.random.default_rng(seed)},
    )
    if np.ptp(diff) == 0:  # every resample has the same mean: the interval is that point (BCa would be 0/0)
        low = high = float(diff[0])
        t_statistic, t_p = math.copysign(math.inf, diff[0]), 0.0  # what ttest_rel gives, without its warning
    else:
        t = stats.ttest_rel(x, y)
        t_statistic, t_p = float(t.statistic), float(t.pvalue)
        boot = stats.bootstrap(
            (x, y), mean_difference, paired=True, vectorized=True, n_resamples=n_resamples, batch=RESAMPLE_BATCH,
            confidence_level=confidence, method=ci_method, **{_rng_kwarg(stats.bootstrap): np.random.default_rng(seed)},
        )
        low, high = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
    return PairedTest(
        mean_diff=float(diff.mean()),
        ci_low=low,
        ci_high=high,
        permutation_p=float(perm.pvalue),
        t_statistic=t_statistic,
        t_p=t_p,
        **common,
    )


Pair = tuple[Sequence[float], Sequence[float]]


def paired_tests(pairs: Sequence[Pair], **options: object) -> list[PairedTest]:
    """:func:`paired_test` of each ``(a, b)`` of ``pairs``, in order (``options``: its keyword arguments)."""
    return [paired_test(a, b, **options) for a, b in pairs]  # type: ignore[arg-type]


def _in_worker(pairs: Sequence[Pair], options: dict[str, object]) -> list[PairedTest]:
    """What a :class:`PendingTests` worker runs (a name of its own, so a test can make the worker die)."""
    return paired_tests(pairs, **options)


class PendingTests:
    """:func:`paired_tests` of ``pairs``, started now and read with :meth:`result`: with ``meanwhile`` (the caller
    has other work to do until then), in a forked worker when there are at least ``BACKGROUND_MIN_VALUES`` paired
    values, another core and a safe fork; else computed here by :meth:`result`. Use it as a context manager: leaving
    the block stops the worker (an error or Ctrl-C in the caller leaves no process behind).

    >>> with PendingTests([([0.5, 1.0, 0.0], [0.25, 0.5, 0.0])], n_resamples=100) as pending:
    ...     [(t.mean_diff, t.wins, t.ties) for t in pending.result()]
    [(0.25, 2, 1)]
    """

    def __init__(self, pairs: Sequence[Pair], *, meanwhile: bool = False, **options: object) -> None:
        self._pairs, self._options = list(pairs), options
        self._results: list[PairedTest] | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._future: Future | None = None
        values = sum(len(a) for a, _ in self._pairs)
        #: whether the tests were given to a worker process
        self.in_worker = meanwhile and values >= BACKGROUND_MIN_VALUES and usable_cores() > 1 and fork_is_safe()
        if self.in_worker:
            self._pool = forked_pool(1)
            self._future = self._pool.submit(_in_worker, self._pairs, options)

    def result(self) -> list[PairedTest]:
        """The tests, in the order of the pairs (waits for the worker, if any)."""
        if self._results is None and self._future is not None:
            try:
                self._results = self._future.result()
            except BrokenProcessPool:  # killed (out of memory, a signal): the same numbers, computed here
                logger.warning("the worker computing the paired tests died; computing them here")
            finally:
                if self._results is not None and self._pool is not None:
                    self._pool.shutdown(wait=True)  # done: the worker exits on its own
                    self._pool = None
                self.close()
        if self._results is None:
            self._results = paired_tests(self._pairs, **self._options)
        return self._results

    def close(self) -> None:
        """Stop the worker, if one runs (its tests are not needed any more)."""
        pool, self._pool, self._future = self._pool, None, None
        if pool is not None:
            stop_pool(pool)

    def __enter__(self) -> "PendingTests":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
