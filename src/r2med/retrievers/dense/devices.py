"""Encoding on several devices at once: ``MultiDeviceEncoder``, one worker process per device.

``make_encoder(spec, device="cuda")`` on a machine with several GPUs (or ``device="cuda:0,cuda:2"``) gives this
encoder. Each device gets a worker process (``torch.multiprocessing``, started with ``spawn``, as CUDA needs), which
loads the model once on its device and keeps it. Each ``encode`` call deals the texts, longest first, over the
workers (``deal``: every worker gets a share of the same lengths); each worker encodes its share as one device
does (token-budget batches, out-of-memory halving, ``--compile``) and hands every batch's vectors back to this
process as soon as they are made. Here they go to ``on_vectors``, so the embedding cache (the one writer of its
folder) keeps them as verified parts as it does for one device: a worker killed, or this process killed, loses at
most what one device would (the batches in flight and under a minute or 512 finished texts), and the next run
encodes only the missing texts.

A worker that fails stops the call with its error (the worker's own when it is one of r2med's, with its exit
code; otherwise ``WorkerFailedError``, exit 6, with the worker's traceback in the log); a worker that dies (a
kill, the kernel's out-of-memory killer) stops it with ``WorkerDiedError`` (exit 6) naming the device, the process
and the signal. Either way the other workers are stopped, and a later call starts them again. Workers ignore
Ctrl-C (this process handles it and stops them), and exit by themselves when this process is gone.

``cpu,cpu`` runs two CPU workers, each with its share of the CPU's threads: how the tests stand in for GPUs.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from r2med.batching import TextTooLongError
from r2med.errors import ProviderError, UsageError
from r2med.forking import watch_parent
from r2med.hf import require
from r2med.io.progress import Reporter, progress_bar
from r2med.retrievers.dense.base import Kind, kind_label, kind_unit

logger = logging.getLogger(__name__)

#: seconds between checks that every busy worker is alive (while no vectors arrive)
POLL_SECONDS = 0.2
#: seconds a worker is given to exit when asked, before it is terminated
STOP_SECONDS = 5.0


class WorkerDiedError(ProviderError):
    """An encoding worker process died (killed, or crashed) in the middle of a call (exit 6)."""


class WorkerFailedError(ProviderError):
    """An encoding worker raised an error that is not one of r2med's (exit 6; its traceback is in the log)."""


def deal(lengths: Sequence[int], n: int) -> list[list[int]]:
    """Shares of the inputs (by ``lengths``) for ``n`` workers: longest first, dealt back and forth (worker 0, 1,
    ..., n-1, then n-1, ..., 0), so every share holds texts of the same lengths and about the same total.

    >>> deal([1, 5, 3, 4, 2], 2)
    [[1, 4, 0], [3, 2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    shares: list[list[int]] = [[] for _ in range(n)]
    for position, item in enumerate(order):
        turn, step = divmod(position, n)
        shares[step if turn % 2 == 0 else n - 1 - step].append(item)
    return shares


class _Worker:
    def __init__(self, device: str, process: Any, tasks: Any) -> None:
        self.device, self.process, self.tasks = device, process, tasks


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
        self._build, self._options, self._setup = build, dict(options), setup
        self._workers: list[_Worker] = []
        self._results: Any = None
        self._finalizer: Any = None
        self._task = 0
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
        return [w.process.pid for w in self._workers]

    def dimension(self, kind: Kind) -> int:
        """The embedding size (asked of the first worker, which loads the model there, not here)."""
        self._start()
        task = self._next_task()
        self._workers[0].tasks.put(("dimension", task, kind))
        for _, what, payload in self._receive(task, {0}):
            if what == "answer":
                return int(payload)
            raise self._error(0, payload, [])
        raise WorkerFailedError(f"{self.name}: the worker on {self.devices[0]} gave no embedding size")

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
        self._start()
        shares = deal([len(t) for t in texts], len(self._workers))
        task = self._next_task()
        busy = set()
        for index, (worker, share) in enumerate(zip(self._workers, shares)):
            if share:
                worker.tasks.put(("encode", task, kind, instruction, batch_size, [texts[i] for i in share]))
                busy.add(index)
        out: np.ndarray | None = None
        try:
            with progress_bar(len(texts), desc=f"{self.name} {kind_label(kind)}", unit=kind_unit(kind),
                              enabled=progress) as bar:
                for index, what, payload in self._receive(task, busy):
                    if what == "error":
                        raise self._error(index, payload, shares[index])
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
        workers, self._workers = self._workers, []
        if self._finalizer is not None:
            self._finalizer.cancel()
            self._finalizer = None
        _stop(workers, self._results, abort)
        self._results = None

    # -- the workers -----------------------------------------------------------------------------

    def _next_task(self) -> int:
        self._task += 1
        return self._task

    def _start(self) -> None:
        if self._workers and all(w.process.is_alive() for w in self._workers):
            return
        if self._workers:
            self.close(abort=True)
        require("torch")
        import multiprocessing.util

        import torch
        import torch.multiprocessing

        context = torch.multiprocessing.get_context("spawn")
        self._results = context.Queue()
        cpus = sum(d == "cpu" for d in self.devices)
        threads = max(1, torch.get_num_threads() // cpus) if cpus > 1 else None
        for index, device in enumerate(self.devices):
            tasks = context.Queue()
            process = context.Process(
                target=_worker_main, name=f"r2med-encoder-{index}-{device}",
                args=(index, device, self._build, _plain(self.spec), self._options, self._setup, tasks, self._results,
                      os.getpid(), threads))
            process.start()
            self._workers.append(_Worker(device, process, tasks))
        logger.info("%s: %d encoding workers started on %s (processes %s)", self.name, len(self._workers),
                    ", ".join(self.devices), ", ".join(str(p) for p in self.pids))
        # stops the workers when this encoder is collected, or at exit (before multiprocessing joins its children)
        self._finalizer = multiprocessing.util.Finalize(self, _stop, args=(list(self._workers), self._results, False),
                                                        exitpriority=10)

    def _receive(self, task: int, busy: set[int]) -> Iterator[tuple[int, str, Any]]:
        """``(worker, what, payload)`` of ``task`` until every worker of ``busy`` is done; a worker found dead (checked
        every ``POLL_SECONDS``, whether or not the others are sending) raises, after what it sent is handed on."""
        busy = set(busy)
        checked = time.monotonic()
        while busy:
            try:
                message = self._results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                message = None
            if message is not None:
                yield from self._handle(message, task, busy)
            if message is not None and time.monotonic() - checked < POLL_SECONDS:
                continue
            checked = time.monotonic()
            dead = [i for i in sorted(busy) if not self._workers[i].process.is_alive()]
            if not dead:
                continue
            until = time.monotonic() + 5 * POLL_SECONDS
            while time.monotonic() < until:  # what was sent before the death is used
                try:
                    late = self._results.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    break
                yield from self._handle(late, task, busy)
            dead = [i for i in dead if i in busy]
            if dead:
                raise self._died(dead[0])

    @staticmethod
    def _handle(message: tuple, task: int, busy: set[int]) -> Iterator[tuple[int, str, Any]]:
        what, task_id, index, payload = message
        if task_id != task:
            return
        if what == "done":
            busy.discard(index)
            return
        if what in ("answer", "error"):
            busy.discard(index)
        yield index, what, payload

    def _died(self, index: int) -> WorkerDiedError:
        worker = self._workers[index]
        code = worker.process.exitcode
        if code is not None and code < 0:
            try:
                how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return WorkerDiedError(
            f"{self.name}: the encoding worker on {worker.device} (device {index + 1} of {len(self.devices)}, process "
            f"{worker.process.pid}) {how} with its texts not all encoded; the vectors the workers finished are kept "
            "in the embedding cache: run the command again to encode only the missing texts")

    def _error(self, index: int, payload: dict[str, Any], share: list[int]) -> BaseException:
        """The parent's error for a worker's failure ``payload`` (``_describe``)."""
        where = f"the encoding worker on {self.devices[index]} (device {index + 1} of {len(self.devices)})"
        too_long = payload.get("too_long")
        if too_long is not None:  # the text's position in the share -> in this call's texts
            position, tokens, device, what = too_long
            return TextTooLongError(share[position] if 0 <= position < len(share) else position, tokens,
                                    device=device, what=what)
        if payload.get("pickled") is not None:
            error = pickle.loads(payload["pickled"])
            logger.debug("%s failed:\n%s", where, payload["traceback"])
            return error
        logger.error("%s failed:\n%s", where, payload["traceback"].rstrip())
        return WorkerFailedError(f"{self.name}: {where} failed: {payload['type']}: {payload['message']} (its "
                                 "traceback is in the log above); the vectors the workers finished are kept")


def _plain(spec: Any) -> tuple[type, dict[str, Any]]:
    """``spec`` (a frozen dataclass whose mappings are read-only proxies, which do not pickle) as its class and
    plain fields, for a worker to make again."""
    import dataclasses
    from collections.abc import Mapping

    return type(spec), {f.name: dict(value) if isinstance(value := getattr(spec, f.name), Mapping) else value
                        for f in dataclasses.fields(spec)}


def _describe(exc: BaseException) -> dict[str, Any]:
    """A worker's error as plain data for the parent: r2med's own errors pickled (when they come back equal)."""
    payload: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc(),
                               "pickled": None, "too_long": None}
    if isinstance(exc, TextTooLongError):
        payload["too_long"] = (exc.index, exc.tokens, exc.device, exc.what)
        return payload
    from r2med.errors import R2MedError

    if isinstance(exc, R2MedError):
        try:
            data = pickle.dumps(exc)
            back = pickle.loads(data)
            if type(back) is type(exc) and str(back) == str(exc):
                payload["pickled"] = data
        except Exception:  # noqa: BLE001  # an error that does not pickle is described in words
            pass
    return payload


def _stop(workers: list[_Worker], results: Any, abort: bool) -> None:
    """Ask the workers to exit (or terminate them at once with ``abort``); kill those that do not."""
    for worker in workers:
        worker.tasks.cancel_join_thread()
        if not abort and worker.process.is_alive():
            try:
                worker.tasks.put(None)
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + (0 if abort else STOP_SECONDS)
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.process.terminate()
    for worker in workers:
        worker.process.join(STOP_SECONDS)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(STOP_SECONDS)
    if results is not None:
        results.cancel_join_thread()
        results.close()


def _worker_main(index: int, device: str, build: Callable[..., Any], spec: Any, options: dict[str, Any],
                 setup: Callable[[Any], None] | None, tasks: Any, results: Any, parent: int,
                 threads: int | None) -> None:
    """A worker: make the encoder on ``device`` (on its first task), then run tasks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    # exit as soon as the process that started it is gone (killed: nothing else would stop it)
    threading.Thread(target=watch_parent, args=(parent,), kwargs={"interval": 0.5, "exit_code": 3}, daemon=True,
                     name="r2med-watch-parent").start()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    if device.startswith("cuda:"):  # pinned buffers and kernels go to this GPU, not to a context on cuda:0
        import torch

        torch.cuda.set_device(device)
    encoder = None
    while True:
        task = tasks.get()
        if task is None:
            break
        op, task_id = task[0], task[1]
        try:
            if encoder is None:
                cls, fields = spec
                encoder = build(cls(**fields), device=device, **options)
                if setup is not None:
                    setup(encoder)
            if op == "dimension":
                results.put(("answer", task_id, index, encoder.dimension(task[2])))
                continue
            _, _, kind, instruction, batch_size, texts = task

            def send(rows: list[int], vectors: np.ndarray, task_id: int = task_id) -> None:
                results.put(("vectors", task_id, index, (list(rows), np.asarray(vectors, dtype=np.float32))))

            encoder.encode(texts, kind=kind, instruction=instruction, batch_size=batch_size, on_vectors=send)
            results.put(("done", task_id, index, None))
        except BaseException as exc:  # noqa: BLE001  # every failure goes to the parent, which decides
            results.put(("error", task_id, index, _describe(exc)))
    results.close()
    results.join_thread()
