"""Worker processes, one per device: how a local model runs on every GPU of the machine (``DeviceWorkers``).

The dense encoders (``r2med.retrievers.dense.devices.MultiDeviceEncoder``) and the local pointwise rerankers
(``r2med.rerankers.devices.MultiDeviceScorer``) use it the same way. Each device gets a worker process
(``torch.multiprocessing``, started with ``spawn``, as CUDA needs), which makes its model once, on its device
(``make(device)``, a picklable callable), and keeps it. A caller deals its inputs over the workers (``deal``: longest
first, so every worker gets a share of the same lengths) and sends each worker a task; the worker runs it
(``serve(model, op, args, send)``, a picklable function), may hand back parts as it goes (``send``: the encoders send
each batch's vectors, so the embedding cache keeps them at once), and ends with its answer.

A worker that fails stops the call with its error (the worker's own when it is one of r2med's, with its exit code;
otherwise ``WorkerFailedError``, exit 6, with the worker's traceback in the log); a worker that dies (a kill, the
kernel's out-of-memory killer) stops it with ``WorkerDiedError`` (exit 6) naming the device, the process and the
signal. Either way the caller stops the other workers (``close(abort=True)``), and a later call starts them again.
Workers ignore Ctrl-C (the caller's process handles it and stops them), and exit by themselves when that process is
gone. ``cpu,cpu`` runs two CPU workers, each with its share of the CPU's threads: how the tests stand in for GPUs.
"""

from __future__ import annotations

import dataclasses
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

from r2med.batching import TextTooLongError
from r2med.errors import ProviderError, UsageError
from r2med.forking import watch_parent
from r2med.hf import require

logger = logging.getLogger(__name__)

#: seconds between checks that every busy worker is alive (while nothing arrives)
POLL_SECONDS = 0.2
#: seconds a worker is given to exit when asked, before it is terminated
STOP_SECONDS = 5.0


class WorkerDiedError(ProviderError):
    """A device's worker process died (killed, or crashed) in the middle of a call (exit 6)."""


class WorkerFailedError(ProviderError):
    """A device's worker raised an error that is not one of r2med's (exit 6; its traceback is in the log)."""


@dataclasses.dataclass(frozen=True)
class Role:
    """How the messages name a pool's work: ``worker`` ("encoding": "the encoding worker on cuda:1"), ``process``
    (the processes' names: ``r2med-<process>-<n>-<device>``), what a dead worker leaves ``unfinished`` and what is
    ``kept`` (with what to do)."""

    worker: str
    process: str
    unfinished: str
    kept: str
    #: after a failure: what the workers' finished work became
    kept_short: str


def deal(lengths: Sequence[int], n: int) -> list[list[int]]:
    """Shares of the inputs (by ``lengths``) for ``n`` workers: longest first, dealt back and forth (worker 0, 1,
    ..., n-1, then n-1, ..., 0), so every share holds inputs of the same lengths and about the same total.

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


class DeviceWorkers:
    """One worker process per device of ``devices`` (two or more), started on the first task (see the module
    docstring). ``make(device)`` makes a worker's model; ``serve(model, op, args, send)`` runs a task;
    ``setup(model)``, a picklable function, runs in each worker after its model is made (tests slow a model down with
    it, or make it fail)."""

    def __init__(self, name: str, devices: Sequence[str], *, make: Callable[[str], Any],
                 serve: Callable[[Any, str, tuple, Callable[[Any], None]], Any], role: Role,
                 setup: Callable[[Any], None] | None = None) -> None:
        if len(devices) < 2:
            raise UsageError(f"a multi-device {role.process} needs two devices or more, got {list(devices)}")
        self.name, self.devices, self.role = name, list(devices), role
        self._make, self._serve, self._setup = make, serve, setup
        self._workers: list[_Worker] = []
        self._results: Any = None
        self._finalizer: Any = None
        #: tasks sent so far (each call that sends work to the workers is one task)
        self.tasks = 0

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (empty before the first task)."""
        return [w.process.pid for w in self._workers]

    def __len__(self) -> int:
        return len(self.devices)

    def send(self, jobs: dict[int, tuple[str, tuple]]) -> tuple[int, set[int]]:
        """Start the workers if needed and send worker ``i`` the task ``jobs[i] = (op, args)``; the task's number
        and the workers now busy with it (for :meth:`receive`)."""
        self._start()
        self.tasks += 1
        for index, (op, args) in jobs.items():
            self._workers[index].tasks.put((op, self.tasks, args))
        return self.tasks, set(jobs)

    def receive(self, task: int, busy: set[int]) -> Iterator[tuple[int, str, Any]]:
        """``(worker, what, payload)`` of ``task`` until every worker of ``busy`` answered: ``what`` is ``part``
        (something it sent as it went), ``answer`` (its last message) or ``error`` (``payload`` for :meth:`error`).
        A worker found dead (checked every ``POLL_SECONDS``, whether or not the others are sending) raises
        :class:`WorkerDiedError`, after what it sent is handed on."""
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

    def ask(self, index: int, op: str, *args: Any) -> Any:
        """The answer of worker ``index`` to one task (its parts are not expected)."""
        task, busy = self.send({index: (op, args)})
        for _, what, payload in self.receive(task, busy):
            if what == "answer":
                return payload
            if what == "error":
                raise self.error(index, payload, [])
        raise WorkerFailedError(f"{self.name}: the {self.role.worker} worker on {self.devices[index]} gave no answer")

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers (at once with ``abort``; else after their current task). A later task starts them again."""
        workers, self._workers = self._workers, []
        if self._finalizer is not None:
            self._finalizer.cancel()
            self._finalizer = None
        _stop(workers, self._results, abort)
        self._results = None

    def error(self, index: int, payload: dict[str, Any], share: list[int]) -> BaseException:
        """The caller's error for worker ``index``'s failure ``payload``; ``share``: the positions of its inputs in
        the call's (a text too long is named by its position in the call)."""
        where = f"the {self.role.worker} worker on {self.devices[index]} (device {index + 1} of {len(self.devices)})"
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
                                 f"traceback is in the log above); {self.role.kept_short}")

    # -- inside -----------------------------------------------------------------------------------

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
                target=_worker_main, name=f"r2med-{self.role.process}-{index}-{device}",
                args=(index, device, self._make, self._serve, self._setup, tasks, self._results, os.getpid(), threads))
            process.start()
            self._workers.append(_Worker(device, process, tasks))
        logger.info("%s: %d %s workers started on %s (processes %s)", self.name, len(self._workers), self.role.worker,
                    ", ".join(self.devices), ", ".join(str(p) for p in self.pids))
        # stops the workers when this pool is collected, or at exit (before multiprocessing joins its children)
        self._finalizer = multiprocessing.util.Finalize(self, _stop, args=(list(self._workers), self._results, False),
                                                        exitpriority=10)

    @staticmethod
    def _handle(message: tuple, task: int, busy: set[int]) -> Iterator[tuple[int, str, Any]]:
        what, task_id, index, payload = message
        if task_id != task:
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
            f"{self.name}: the {self.role.worker} worker on {worker.device} (device {index + 1} of {len(self.devices)}, "
            f"process {worker.process.pid}) {how} with {self.role.unfinished}; {self.role.kept}")


def plain(spec: Any) -> tuple[type, dict[str, Any]]:
    """``spec`` (a frozen dataclass whose mappings are read-only proxies, which do not pickle) as its class and
    plain fields, for a worker to make again (``cls(**fields)``)."""
    from collections.abc import Mapping

    return type(spec), {f.name: dict(value) if isinstance(value := getattr(spec, f.name), Mapping) else value
                        for f in dataclasses.fields(spec)}


def _describe(exc: BaseException) -> dict[str, Any]:
    """A worker's error as plain data for the caller: r2med's own errors pickled (when they come back equal)."""
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


def _worker_main(index: int, device: str, make: Callable[[str], Any],
                 serve: Callable[[Any, str, tuple, Callable[[Any], None]], Any], setup: Callable[[Any], None] | None,
                 tasks: Any, results: Any, parent: int, threads: int | None) -> None:
    """A worker: make its model on ``device`` (on its first task), then run tasks until told to stop."""
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
    from r2med.io.progress import library_bars_off

    with library_bars_off():  # no "Loading weights" bar of the workers' among the parent's bars
        _run_tasks(index, device, make, serve, setup, tasks, results)
    results.close()
    results.join_thread()


def _run_tasks(index: int, device: str, make: Callable[[str], Any],
               serve: Callable[[Any, str, tuple, Callable[[Any], None]], Any], setup: Callable[[Any], None] | None,
               tasks: Any, results: Any) -> None:
    """A worker's loop: each task's parts and answer (or error) to ``results``, until a ``None`` task."""
    model = None
    while True:
        task = tasks.get()
        if task is None:
            break
        op, task_id, args = task
        try:
            if model is None:
                model = make(device)
                if setup is not None:
                    setup(model)

            def send(part: Any, task_id: int = task_id) -> None:
                results.put(("part", task_id, index, part))

            results.put(("answer", task_id, index, serve(model, op, args, send)))
        except BaseException as exc:  # noqa: BLE001  # every failure goes to the parent, which decides
            results.put(("error", task_id, index, _describe(exc)))
