"""Forked worker processes that never outlive their parent: the one way r2med spreads CPU work over cores in
one command (BM25's analysis without its C kernel, the report's significance tests).

Workers are forked, so they read the parent's memory without copying it and start without importing anything
again. Each asks the kernel for SIGTERM when the parent dies (``prctl(PR_SET_PDEATHSIG)`` on Linux) and runs a
watchdog thread that exits when its parent process changes (every platform); the parent terminates them when it is
interrupted (Ctrl-C, or SIGTERM, which ``r2med`` turns into the same interruption). Workers ignore Ctrl-C
themselves: the parent stops them. Where ``fork`` is not available or not safe (a JVM in the process), callers
run their work in their own process (:func:`fork_is_safe`).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

#: prctl option: the signal this process gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: seconds between the watchdog's looks at the parent
WATCH_INTERVAL = 0.25


def watch_parent(parent: int, *, interval: float = WATCH_INTERVAL, exit_code: int = 1) -> None:
    """Exit this worker (``os._exit(exit_code)``) once its parent ``parent`` is gone (it is re-parented, so
    ``getppid`` changes); checks every ``interval`` seconds. Run it on a daemon thread."""
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(exit_code)


def worker_init(parent: int) -> None:
    """Run first in every worker: die with the parent ``parent`` (its pid), leave interruptions to it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler inherited from the parent (r2med's raises)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops the workers
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no libc symbol: the watchdog alone
            pass
    if os.getppid() != parent:  # the parent died before the prctl: no signal will come
        os._exit(1)
    threading.Thread(target=watch_parent, args=(parent,), name="r2med-parent-watch", daemon=True).start()


def forked_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` forked processes, each set up by :func:`worker_init`. Use ``submit`` + ``result`` (a
    dead worker raises BrokenProcessPool instead of hanging), and :func:`stop_pool` when interrupted."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=worker_init,
                               initargs=(os.getpid(),))


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers now (the parent was interrupted or failed) and wait briefly for them."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if callable(terminate):
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    # no cancel_futures: the manager thread fails the pending futures itself (BrokenProcessPool), nothing races it
    pool.shutdown(wait=False)
    for process in processes:
        process.join(timeout=5)


def fork_is_safe() -> bool:
    """Whether worker processes may be forked from this one.

    Forking copies nothing, but a fork taken while a JVM runs in the process (Pyserini, for one)
    can deadlock the child, so then everything stays in this process.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "libjvm" not in maps.read()
    except OSError:
        return True


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the platform says it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
