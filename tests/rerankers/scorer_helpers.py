"""Set-up functions for the scoring workers of ``MultiDeviceScorer`` in the tests (``setup=``): each runs in a worker
process after its scorer is made. Module level, so that the workers (spawned processes) can import them."""

from __future__ import annotations

import os
import signal


def dying(scorer) -> None:
    """The worker is killed (SIGKILL, as by the kernel's out-of-memory killer) when it is asked to score."""
    def score(queries, documents):
        os.kill(os.getpid(), signal.SIGKILL)

    scorer.score = score


def failing(scorer) -> None:
    """Every call fails as a model's bug would."""
    def score(queries, documents):
        raise ValueError(f"boom in a share of {len(queries)} pairs")

    scorer.score = score
