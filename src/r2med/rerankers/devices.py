"""The local pointwise rerankers on several devices: ``MultiDeviceScorer``, one worker process per device.

A cross-encoder, RankLLaMA or Qwen3-Reranker run here with ``--device cuda`` on a machine with several GPUs (or
``--device cuda:0,cuda:2``; ``cpu,cpu`` is two CPU workers, the tests' stand-in) is this scorer
(:func:`scorer_on_devices`). Each device gets a worker process (``r2med.devices.DeviceWorkers``) that loads the model
once and keeps it. ``PointwiseReranker`` hands the scorer groups of pairs (1,024, longest first, between two writes
of the score cache); each group is dealt over the workers (``deal``: every worker gets pairs of the same lengths),
and each worker scores its share as one device does: token-budget batches capped at ``--batch-size`` pairs, its
out-of-memory halving of its own. Scores do not depend on the device that made them (the same model, batches of
similar pairs: float noise only, tested), so the score cache's key is one device's: a rerun on one GPU reuses what
several scored. A worker that fails or dies stops the call as one device's error would (exit 6, the worker's own
error when it is one of r2med's); the groups scored before are in the score cache, and a rerun scores only the rest.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from r2med.batching import TokenBudget
from r2med.devices import DeviceWorkers, Role, WorkerFailedError, deal
from r2med.errors import UsageError

logger = logging.getLogger(__name__)

#: how the messages name the scoring workers' work
SCORING = Role(worker="scoring", process="scorer", unfinished="its pairs not all scored",
               kept="the pairs scored before this group are kept in the score cache: run the command again to score "
                    "only the missing pairs",
               kept_short="the pairs scored before this group are kept in the score cache")


class MultiDeviceScorer:
    """A ``PairScorer`` over several devices (see the module docstring). ``template``: the scorer of the first device,
    never loaded here (its ``describe()`` is this scorer's: the score cache's key); ``make(device)`` makes a worker's
    scorer; ``setup(scorer)``, a picklable function, runs in each worker after its scorer is made (tests)."""

    def __init__(self, template: Any, devices: Sequence[str], *, make: Callable[[str], Any],
                 setup: Callable[[Any], None] | None = None) -> None:
        if len(devices) < 2:
            raise UsageError(f"a multi-device scorer needs two devices or more, got {list(devices)}")
        self.template = template
        self.name = str(getattr(template, "model_id", type(template).__name__))
        self.devices = list(devices)
        self.device = ",".join(self.devices)
        #: the reranker sets ``texts`` (its --batch-size); each worker cuts its share's batches with it
        self.token_budget = TokenBudget(tokens=getattr(getattr(template, "token_budget", None), "tokens", None))
        self.workers = DeviceWorkers(self.name, self.devices, make=make, serve=_serve, role=SCORING, setup=setup)
        #: pairs each device scored (by position in ``devices``) since this object was made
        self.scored = [0] * len(self.devices)

    def describe(self) -> dict[str, Any]:
        return self.template.describe()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (empty before the first call)."""
        return self.workers.pids

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        """The scores of the pairs ``zip(queries, documents)``, in order, the pairs dealt over the devices."""
        pairs = list(zip(queries, documents))
        if len(pairs) != len(queries) or len(pairs) != len(documents):
            raise UsageError(f"{len(queries)} queries and {len(documents)} documents: a pair needs one of each")
        if not pairs:
            return []
        shares = deal([len(q) + len(d) for q, d in pairs], len(self.devices))
        out: list[float | None] = [None] * len(pairs)
        try:
            task, busy = self.workers.send({
                index: ("score", (self.token_budget.texts, [pairs[i][0] for i in share], [pairs[i][1] for i in share]))
                for index, share in enumerate(shares) if share})
            for index, what, payload in self.workers.receive(task, busy):
                if what == "error":
                    raise self.workers.error(index, payload, shares[index])
                if len(payload) != len(shares[index]):  # a scorer's bug, not the user's: exit 6
                    raise WorkerFailedError(f"{self.name}: the worker on {self.devices[index]} returned {len(payload)} "
                                            f"scores for {len(shares[index])} pairs")
                for position, value in zip(shares[index], payload):
                    out[position] = float(value)
                self.scored[index] += len(payload)
        except BaseException:
            self.close(abort=True)  # the other workers' share of this group is abandoned; a next call starts anew
            raise
        return [float(v) for v in out]  # type: ignore[arg-type]  # every pair is in a share, every share came back

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers (at once with ``abort``). A later call starts them again."""
        self.workers.close(abort=abort)


def _make(cls: type, args: tuple, options: dict[str, Any], device: str) -> Any:
    """A worker's scorer: ``cls(*args, device=device, **options)``."""
    return cls(*args, device=device, **options)


def _serve(scorer: Any, op: str, args: tuple, send: Callable[[Any], None]) -> list[float]:
    """A worker's task: ``score`` its share of a group of pairs, at most ``texts`` pairs per batch."""
    texts, queries, documents = args
    budget = getattr(scorer, "token_budget", None)
    if isinstance(budget, TokenBudget):
        budget.texts = texts
    return [float(v) for v in scorer.score(queries, documents)]


def scorer_on_devices(cls: type, *args: Any, device: str | None, setup: Callable[[Any], None] | None = None,
                      **options: Any) -> Any:
    """The scorer ``cls(*args, device=..., **options)`` on the devices ``device`` names: one device (``cpu``,
    ``cuda:1``, ``mps``, or ``auto``/``cuda`` where one GPU is visible) gives ``cls``'s scorer itself; a list
    (``cuda:0,cuda:2``, ``cpu,cpu``) or ``auto``/``cuda`` with several GPUs visible gives a :class:`MultiDeviceScorer`
    (``r2med.hf.resolve_devices`` says which). The model is checked when the first scorer is made, before torch."""
    wanted = (device or "auto").strip().lower()
    if "," not in wanted and wanted not in ("auto", "cuda"):
        return cls(*args, device=device, **options)
    template = cls(*args, device=wanted.split(",")[0], **options)
    from r2med.hf import resolve_devices

    devices = resolve_devices(device)
    if len(devices) == 1:
        return template if devices[0] == template.device else cls(*args, device=devices[0], **options)
    logger.info("%s: scoring on %s, one worker process each", getattr(template, "model_id", cls.__name__),
                ", ".join(devices))
    return MultiDeviceScorer(template, devices, make=functools.partial(_make, cls, args, options), setup=setup)
