"""Encoding on several devices at once: ``MultiDeviceEncoder``, one worker process per device.

``make_encoder(spec, device="cuda")`` on a machine with several GPUs (or ``device="cuda:0,cuda:2"``) gives this
encoder. Each device gets a worker process (``r2med.devices.DeviceWorkers``: spawned, as CUDA needs), which
loads the model once on its device and keeps it. Each ``encode`` call deals the texts, longest first, over the
workers (``deal``: every worker gets a share of the same lengths); each worker encodes its share as one device
does (token-budget batches, out-of-memory halving, ``--compile``) and hands every batch's vectors back to this
process as soon as they are made. Here they go to ``on_vectors``, so the embedding cache (the one writer of its
folder) keeps them as verified parts as it does for one device: a worker killed, or this process killed, loses at
most what one device would (the batches in flight and under a minute or 512 finished texts), and the next run
encodes only the missing texts.

A worker that fails or dies stops the call (``r2med.devices``: its own error, ``WorkerFailedError`` or
``WorkerDiedError``, exit 6); the other workers are stopped, and a later call starts them again.
``cpu,cpu`` runs two CPU workers, each with its share of the CPU's threads: how the tests stand in for GPUs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from r2med.devices import DeviceWorkers, Role, WorkerDiedError, WorkerFailedError, deal, plain
from r2med.errors import UsageError
from r2med.io.progress import Reporter, progress_bar
from r2med.retrievers.dense.base import Kind, kind_label, kind_unit

__all__ = ["MultiDeviceEncoder", "WorkerDiedError", "WorkerFailedError", "deal"]

logger = logging.getLogger(__name__)

#: how the messages name the encoding workers' work
ENCODING = Role(worker="encoding", process="encoder", unfinished="its texts not all encoded",
                kept="the vectors the workers finished are kept in the embedding cache: run the command again to "
                     "encode only the missing texts",
                kept_short="the vectors the workers finished are kept")


class MultiDeviceEncoder:
    """An ``Encoder`` over several devices (see the module docstring).

    ``template``: the encoder of one device, never loaded here (it gives the name and the cache key: the vectors
    are the same on every device of a kind, so the embedding cache does not record which ones ran); ``build(spec,
    device=..., **options)`` makes each worker's encoder; ``setup(encoder)``, a picklable function, runs in each
    worker after its encoder is made (tests slow a model down with it, or make it fail).
    """

    def __init__(self, template: Any, devices: Sequence[str], *, build: Callable[..., Any], options: dict[str, Any],
                 setup: Callable[[Any], None] | None = None) -> None:
        if len(devices) < 2:
            raise UsageError(f"a multi-device encoder needs two devices or more, got {list(devices)}")
        self.template = template
        self.spec = template.spec
        self.name = template.name
        self.devices = list(devices)
        self.device = ",".join(self.devices)
        self.workers = DeviceWorkers(self.name, self.devices, role=ENCODING, setup=setup, serve=_serve,
                                     make=functools.partial(_make, build, plain(self.spec), dict(options)))
        #: texts each device encoded (by position in ``devices``) since this object was made
        self.encoded = [0] * len(self.devices)
        #: the embedding cache hands this many chunks to one call (``EmbeddingCache``): the workers wait for each
        #: other at the end of a call, so once per several chunks, not after every one
        self.chunks_per_call = len(self.devices)

    # -- the encoder role ------------------------------------------------------------------------

    def cache_key(self, kind: Kind) -> dict[str, Any]:
        return self.template.cache_key(kind)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (empty before the first call)."""
        return self.workers.pids

    @property
    def _task(self) -> int:
        """Calls that sent the workers work (the tests count them)."""
        return self.workers.tasks

    def dimension(self, kind: Kind) -> int:
        """The embedding size (asked of the first worker, which loads the model there, not here)."""
        return int(self.workers.ask(0, "dimension", kind))

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: Kind,
        instruction: str = "",
        batch_size: int | None = None,
        progress: bool = False,
        on_batch: Reporter | None = None,
        on_vectors: Callable[[list[int], np.ndarray], None] | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts`` in input order, the texts dealt over the devices (``BaseEncoder.encode``'s contract:
        ``on_vectors(rows, vectors)`` and ``on_batch(n)`` per batch, as they arrive from any worker)."""
        if kind not in ("query", "document"):
            raise UsageError(f"kind must be 'query' or 'document', got {kind!r}")
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch size must be >= 1, got {batch_size}")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension(kind)), dtype=np.float32)
        shares = deal([len(t) for t in texts], len(self.devices))
        out: np.ndarray | None = None
        try:
            task, busy = self.workers.send({index: ("encode", (kind, instruction, batch_size, [texts[i] for i in share]))
                                            for index, share in enumerate(shares) if share})
            with progress_bar(len(texts), desc=f"{self.name} {kind_label(kind)}", unit=kind_unit(kind),
                              enabled=progress) as bar:
                for index, what, payload in self.workers.receive(task, busy):
                    if what == "error":
                        raise self.workers.error(index, payload, shares[index])
                    if what == "answer":
                        continue
                    rows = [shares[index][r] for r in payload[0]]
                    vectors = payload[1]
                    if out is None:
                        out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                    out[rows] = vectors
                    self.encoded[index] += len(rows)
                    bar.update(len(rows))
                    if on_vectors is not None:
                        on_vectors(rows, vectors)
                    if on_batch is not None:
                        on_batch(len(rows))
        except BaseException:
            self.close(abort=True)  # the other workers' work of this call is abandoned; a next call starts anew
            raise
        assert out is not None  # every text is in a share, and every share came back
        return out

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers (at once with ``abort``; else after their current call). A later call starts them again."""
        self.workers.close(abort=abort)


def _make(build: Callable[..., Any], spec: tuple[type, dict[str, Any]], options: dict[str, Any], device: str) -> Any:
    """A worker's encoder: ``build(spec, device=device, **options)`` (``spec`` as :func:`r2med.devices.plain` gives
    it)."""
    cls, fields = spec
    return build(cls(**fields), device=device, **options)


def _serve(encoder: Any, op: str, args: tuple, send: Callable[[Any], None]) -> Any:
    """A worker's task: ``dimension`` (of a kind), or ``encode`` its share, each batch's ``(rows, vectors)`` sent."""
    if op == "dimension":
        return encoder.dimension(args[0])
    kind, instruction, batch_size, texts = args

    def vectors(rows: list[int], values: np.ndarray) -> None:
        send((list(rows), np.asarray(values, dtype=np.float32)))

    encoder.encode(texts, kind=kind, instruction=instruction, batch_size=batch_size, on_vectors=vectors)
    return None
