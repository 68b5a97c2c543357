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

Workers never outlive their parent, and the parent stops them when it is interrupted (:mod:`r2med.forking`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator, Sequence

from r2med.forking import fork_is_safe, forked_pool, stop_pool
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
        pool = forked_pool(workers)
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
            stop_pool(pool)
            raise
        pool.shutdown(wait=True)
    finally:
        _TEXTS, _ANALYZER = (), None
    logger.debug("analysed %d texts in %d slices on %d forked workers", len(texts), len(bounds), workers)
    return merged
