"""Analyse a corpus and count its terms on every core.

With BM25's C kernel (:mod:`r2med.retrievers.bm25.kernel`) everything runs in this process: the analyzer's chunk
table looks the texts up on a thread while this thread analyses the new chunks, in slices that grow from 4,000
to 32,000 texts, and the counts are made from the chunks on every core
(``vocabulary.matrix_from_chunks``). Without it (an install with no C compiler), as follows.

Each worker process analyses a contiguous slice of the corpus and turns it into provisional term
ids (``EnglishAnalyzer.term_ids``, made ready to merge by ``vocabulary.slice_counts``); the parent
merges the slices in corpus order as they arrive, while the workers go on, and counts each slice's tokens
in their final ids (``vocabulary.merge_slice_counts``), which gives the same
vocabulary, ids and counts as one pass in one process. Workers are forked, so they read the
texts from the parent's memory without copying them; only small arrays and term lists come back.
Where ``fork`` is not available or not safe (a JVM in the process), or the corpus is small,
everything runs in this process.

Workers never outlive their parent: each asks the kernel for SIGTERM when the parent dies
(``prctl(PR_SET_PDEATHSIG)`` on Linux) and runs a watchdog thread that exits when its parent process
changes (every platform), and the parent terminates them when it is interrupted (Ctrl-C, or SIGTERM,
which ``r2med`` turns into the same interruption). Workers ignore Ctrl-C themselves: the parent stops them.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
from r2med.retrievers.bm25.chunks import NativeChunkTable
from r2med.retrievers.bm25.cores import default_workers
from r2med.retrievers.bm25.sparse import CsrMatrix
from r2med.retrievers.bm25.vocabulary import SliceCounts, matrix_from_chunks, merge_slice_counts, slice_counts

logger = logging.getLogger(__name__)


#: below this many texts the pool's start-up costs more than it saves
MIN_PARALLEL_TEXTS = 20_000
_SLICE = 4_000
#: with BM25's C kernel, the slices grow from _SLICE texts to this many times that: the first is looked up soon, and
#: few slices mean few hand-offs of the GIL between the lookups' thread and the analysis (each can wait for the
#: interpreter's switch interval, 5 ms); on the synthetic corpus 16 slices -> 5: the analysis's median 0.69 -> 0.64 s
#: (7 runs each, a noisy host)
_NATIVE_GROWTH = 8
#: slices of texts analysed here, as one, before the workers are forked. Two, not one: on the synthetic corpus
#: (61,379 texts, 2 workers) the workers then analyse fewer chunks that both of them meet for the first time;
#: analysis 1.52 -> 1.45 s wall, 2.49 -> 2.22 s CPU (one run each of 4,000, 8,000, 12,000 and 16,000 texts;
#: more costs wall time again)
_PRIME_SLICES = 2

# set in the parent just before forking; read by the workers
_TEXTS: Sequence[str] = ()
_ANALYZER: EnglishAnalyzer | None = None


def growing_slices(n: int, first: int, most: int) -> list[tuple[int, int]]:
    """``(start, stop)`` slices of ``n`` texts, the first of ``first`` texts, each next one twice as long, up to
    ``most`` times the first.

    >>> growing_slices(100, 10, 4)
    [(0, 10), (10, 30), (30, 70), (70, 100)]
    """
    bounds, start, size = [], 0, max(1, first)
    while start < n:
        bounds.append((start, min(start + size, n)))
        start += size
        size = min(2 * size, max(1, first) * most)
    return bounds


def _work(bounds: tuple[int, int]) -> SliceCounts:
    """One slice ``(start, stop)`` of the texts the forked parent holds."""
    gc.disable()  # this worker process is ours; its allocations are acyclic lists and strings
    analyzer = _ANALYZER or EnglishAnalyzer()
    return slice_counts(*analyzer.term_ids(_TEXTS[bounds[0]:bounds[1]]))


#: prctl option: the signal this process gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: seconds between the watchdog's looks at the parent
WATCH_INTERVAL = 0.25


def _worker_init(parent: int) -> None:
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
    threading.Thread(target=_watch_parent, args=(parent,), name="r2med-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Exit this worker once its parent is gone (it is re-parented, so ``getppid`` changes)."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL)
    os._exit(1)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers now (the parent was interrupted) and wait briefly for them."""
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


def analyze_and_count(
    texts: Sequence[str],
    analyzer: EnglishAnalyzer,
    *,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[list[str], CsrMatrix]:
    """Vocabulary (gensim order) and document x term counts of ``texts``, as ``count_matrix`` gives them.

    ``on_progress(n)`` is called as each slice of ``n`` texts is done.

    The cyclic garbage collector is paused meanwhile (the analysis makes many small acyclic tuples, and every
    collection of the oldest generation would walk the whole process, the loaded corpus included: 9% of the
    priming's time on the synthetic corpus) and resumed as it was, however this returns.

    >>> vocab, counts = analyze_and_count(["Dogs bark", "A dog"], EnglishAnalyzer(), workers=1)
    >>> vocab, counts.toarray().tolist()
    (['bark', 'dog'], [[1, 1], [0, 1]])
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze_and_count(texts, analyzer, workers=workers, on_progress=on_progress)
    finally:
        if was_enabled:
            gc.enable()


def _analyze_and_count(
    texts: Sequence[str], analyzer: EnglishAnalyzer, *, workers: int | None, on_progress: Callable[[int], None] | None
) -> tuple[list[str], CsrMatrix]:
    global _TEXTS, _ANALYZER
    workers = default_workers() if workers is None else max(1, workers)
    bounds = [(s, min(s + _SLICE, len(texts))) for s in range(0, len(texts), _SLICE)]
    report = on_progress or (lambda n: None)
    table = analyzer.chunk_table
    if isinstance(table, NativeChunkTable):  # BM25's C kernel: one process, the lookups on a thread
        if len(table) >= analyzer.max_cache_entries:
            table.clear()
        parts = []
        growing = growing_slices(len(texts), _SLICE, _NATIVE_GROWTH)
        for (start, stop), part in zip(growing, table.scan_many(texts[start:stop] for start, stop in growing)):
            parts.append(part)
            report(stop - start)
        return matrix_from_chunks(table, parts, analyzer.terms_by_id, workers=workers)
    if workers == 1 or len(texts) < MIN_PARALLEL_TEXTS or not fork_is_safe():
        def analysed() -> Iterator[SliceCounts]:
            for start, stop in bounds:
                yield slice_counts(*analyzer.term_ids(texts[start:stop]))
                report(stop - start)

        return merge_slice_counts(analysed(), workers=workers)
    # the first _PRIME_SLICES slices here, before forking: the workers inherit an analyzer that already knows
    # their chunks (the most frequent ones), instead of each analysing them again
    start, stop = 0, min(_PRIME_SLICES * _SLICE, len(texts))
    parts = [slice_counts(*analyzer.term_ids(texts[start:stop]))]
    report(stop - start)
    bounds = [(s, min(s + _SLICE, len(texts))) for s in range(stop, len(texts), _SLICE)]
    _TEXTS, _ANALYZER = texts, analyzer
    try:
        # a dead worker raises BrokenProcessPool here instead of hanging, as multiprocessing.Pool would
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_init,
                                   initargs=(os.getpid(),))
        # submit + result, not pool.map: map's generator cancels the pending futures from this thread when it is
        # interrupted, racing the pool's manager thread, which then sets BrokenProcessPool on a cancelled future
        # (InvalidStateError printed after "r2med: interrupted")
        futures = [pool.submit(_work, bound) for bound in bounds]

        def finished() -> Iterator[SliceCounts]:
            yield from parts
            for (start, stop), future in zip(bounds, futures):
                yield future.result()
                report(stop - start)

        try:  # each slice is counted here as it arrives, while the workers analyse the next ones
            merged = merge_slice_counts(finished(), workers=workers)
        except BaseException:  # interrupted (KeyboardInterrupt, SIGTERM) or failed: no worker keeps running
            _stop(pool)
            raise
        pool.shutdown(wait=True)
    finally:
        _TEXTS, _ANALYZER = (), None
    logger.debug("analysed %d texts in %d slices on %d forked workers", len(texts), len(bounds), workers)
    return merged
