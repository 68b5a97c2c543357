"""Many texts to term ids with NumPy: no Python object per token, one Python call per distinct chunk.

Lucene's tokens never contain a character of class OTHER, and the tokens of a text are those of its
pieces between such characters (a scan cannot start at one, and stops before one). The ASCII control
characters and the space (U+0000-U+0020, U+007F) are all of that class, so a text cut at them into
*chunks* analyses chunk by chunk, and a chunk's terms depend on its bytes alone.

:class:`ChunkTable` works on the UTF-8 bytes of a batch of texts:

1. NumPy finds the chunks (runs of non-separator bytes);
2. a chunk of at most 16 bytes is its own key: its bytes read as two little-endian 64-bit words,
   zero-padded (a chunk holds no NUL byte, so the key is exact, no hash); a vectorised
   open-addressing hash table, kept for the table's lifetime, maps each key to a chunk id;
3. longer chunks (about 1 token in 100 in English text) go through a dict of their bytes;
4. only a chunk never seen before is decoded and analysed in Python (``analyse``); its term ids are
   stored, and NumPy expands every chunk of the batch into its term ids.

The result is the same as analysing each text and numbering its terms, in a third of the time of a
dict lookup per token (measured on 4.7 million tokens: 0.7 s against 1.5 s).

:class:`NativeChunkTable` does the same with BM25's C kernel (:mod:`r2med.retrievers.bm25.kernel`): one pass
over each text finds its chunks and looks each up in a hash table of their bytes (any length), on a thread without
the GIL, plain words are analysed there too, and the other new chunks in Python as above (the synthetic corpus's
analysis: 0.47 s, against 1.6-1.8 s with NumPy on two forked workers). :func:`make_chunk_table` picks it where the
kernel was built.

>>> table = make_chunk_table(lambda chunk: tuple(ord(c) for c in chunk.strip(".")))
>>> ids, lengths = table.term_ids(["ab. b", "", "  ab\\tb\\x00c"])
>>> ids.tolist(), lengths.tolist()
([97, 98, 98, 97, 98, 98, 99], [3, 0, 4])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from r2med.retrievers.bm25 import kernel

__all__ = [
    "SEPARATOR_BYTES", "NativeChunkTable", "NumpyChunkTable", "PlainWords", "Scanned", "first_occurrence",
    "make_chunk_table",
]

#: The bytes chunks are cut at: ASCII controls, space and DEL, all of class OTHER for Lucene's tokenizer.
SEPARATOR_BYTES = bytes([*range(0x21), 0x7F])

# _LOW_BYTES[n]: the n low bytes of a 64-bit word
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_SHORT = 16  # longest chunk (in bytes) keyed by its two words
# per chunk length n <= 16: the masks of its bytes in the first and in the second word
_MASK_1 = _LOW_BYTES[np.minimum(np.arange(_SHORT + 1), 8)]
_MASK_2 = _LOW_BYTES[np.clip(np.arange(_SHORT + 1) - 8, 0, 8)]
_FIRST_BITS = 16
#: the key of every chunk longer than 16 bytes in ``_short_chunks`` (its bytes are 0xFF, never in UTF-8)
_NO_CHUNK = np.uint64(0xFFFFFFFFFFFFFFFF)
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M3 = np.uint64(0xBF58476D1CE4E5B9)


def _encode(texts: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """``texts`` as one UTF-8 buffer (separated by newlines) and the byte length of each."""
    try:
        parts = [text.encode("utf-8", "surrogatepass") for text in texts]
    except AttributeError:
        index, text = next((i, t) for i, t in enumerate(texts) if not isinstance(t, str))
        raise TypeError(f"texts[{index}] must be str, got {type(text).__name__}: {text!r:.80}") from None
    return b"\n".join(parts), np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))


def _mix(k1: np.ndarray, k2: np.ndarray, bits: int) -> np.ndarray:
    """A slot in a table of ``2**bits`` for each key (a multiply-xorshift hash of both words)."""
    h = (k1 * _M1) ^ (k2 * _M2)
    h ^= h >> np.uint64(31)
    h *= _M3
    return (h >> np.uint64(64 - bits)).astype(np.int64)


class PlainWords(NamedTuple):
    """How an analyzer treats a plain word (an ASCII chunk whose core, without the punctuation at its ends, is 1-255
    letters and digits: one token, lower-cased), so that BM25's C kernel can do it without calling ``analyse``: the
    stop words it drops, whether it stems (Porter), and ``term_ids(term)``, the lifetime ids of a term (``()`` for
    ``""``, a dropped word)."""

    stop_words: frozenset[str]
    stemming: bool
    term_ids: Callable[[str], tuple[int, ...]]


def make_chunk_table(
    analyse: Callable[[str], tuple[int, ...]], words: PlainWords | None = None
) -> NativeChunkTable | NumpyChunkTable:
    """A chunk table (``analyse(chunk)`` gives a new chunk's term ids) on BM25's C kernel where it was built, which
    then analyses plain words itself as ``words`` says (``None``: every new chunk goes to ``analyse``)."""
    return NumpyChunkTable(analyse) if kernel.native is None else NativeChunkTable(analyse, words)


def first_occurrence(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` (each in ``[0, n)``) renumbered in order of first occurrence: ``(order, local)``, ``order[k]`` the
    k-th distinct id to occur, ``local[i]`` the new number of ``ids[i]``.

    >>> order, local = first_occurrence(np.array([5, 2, 5, 0, 2]), 6)
    >>> order.tolist(), local.tolist()
    ([5, 2, 0], [0, 1, 0, 2, 1])
    """
    first = np.full(n, len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
    present = np.flatnonzero(first < len(ids))
    order = present[np.argsort(first[present], kind="stable")]
    local = np.empty(n, dtype=np.int64)
    local[order] = np.arange(len(order), dtype=np.int64)
    return order, local[ids]


class Scanned(NamedTuple):
    """One batch of texts looked up in a :class:`NativeChunkTable`: the chunk id of every chunk of every text
    (int32, in order) and the number of chunks of each text (int64), as the kernel's bytearrays (or views of a
    part of them)."""

    occurrences: bytearray | memoryview
    chunks_per_text: bytearray | memoryview


class NativeChunkTable:
    """:class:`NumpyChunkTable`'s work on BM25's C kernel: the same ids for the same texts and ``analyse``.

    Besides :meth:`term_ids`, a whole corpus can be counted without term ids per token: :meth:`scan_many`
    looks its batches up (analysing each new chunk once), then :meth:`first_terms` and :meth:`count` work from
    the chunks (:func:`r2med.retrievers.bm25.vocabulary.matrix_from_chunks`).
    """

    def __init__(self, analyse: Callable[[str], tuple[int, ...]], words: PlainWords | None = None) -> None:
        if kernel.native is None:
            raise RuntimeError("BM25's C kernel (r2med.retrievers.bm25._native) was not built")
        self._analyse = analyse
        self._words = words
        if words is None:
            self._table = kernel.native.ChunkTable()
        else:
            self._table = kernel.native.ChunkTable(words=True, stop_words=sorted(words.stop_words),
                                                   stemming=words.stemming)

    def clear(self) -> None:
        """Forget every chunk."""
        self._table.clear()

    def __len__(self) -> int:
        """The number of distinct chunks seen."""
        return len(self._table)

    def term_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The term id of every token of ``texts`` (flat, in order) and the number of tokens of each text."""
        scanned = self._scan(texts)
        try:
            occurrences, per_text = self._analysed(scanned)
        except BaseException:  # the new chunks have no terms: start again from an empty table
            self._table.clear()
            raise
        ids, lengths = self._table.expand(occurrences, per_text)
        return np.frombuffer(ids, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64)

    def scan_many(self, batches: Iterable[Sequence[str]]) -> Iterator[Scanned]:
        """Each batch of texts looked up, its new chunks analysed, in order. The batches are looked up one after
        the other on a thread (C, without the GIL) while this thread analyses the new chunks of those done
        (Python); all are queued at once, so the lookups never wait for the analysis.

        What is yielded stays valid as long as the table is not cleared. A run that stops early (an error, an
        interruption, a caller that stops iterating) clears the table: it may hold chunks handed out that will
        get no terms.
        """
        with ThreadPoolExecutor(1, thread_name_prefix="r2med-chunks") as pool:
            pending = [pool.submit(self._scan, texts) for texts in batches]
            analysed = 0
            try:
                for future in pending:
                    part = self._analysed(future.result())
                    analysed += 1
                    yield part
            finally:
                if analysed < len(pending):  # stopped early: chunks handed out that will get no terms must go
                    for future in pending:
                        future.cancel()
                    for future in pending:
                        if not future.cancelled():
                            try:
                                future.result()  # the lookup running now: clear() must wait for it
                            except BaseException:  # noqa: BLE001 - its own failure: the caller already has one
                                pass
                    self._table.clear()

    def first_terms(self, parts: Sequence[Scanned], n_ids: int) -> tuple[np.ndarray, np.ndarray]:
        """Over the texts of ``parts`` (in order): the distinct term ids (each below ``n_ids``) in order of first
        occurrence, and the text each first occurs in."""
        order, first_text = self._table.first_terms(parts, n_ids)
        return np.frombuffer(order, dtype=np.int64), np.frombuffer(first_text, dtype=np.int64)

    def count(self, part: Scanned, final: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each text of ``part`` as its distinct final term ids (``final[term id]``, below ``n_terms``) in
        increasing order, their counts, and how many per text: ``(columns, counts, per_row)``."""
        columns, counts, per_row = self._table.count(*part, np.ascontiguousarray(final, dtype=np.int64), n_terms)
        return (np.frombuffer(columns, dtype=np.int32), np.frombuffer(counts, dtype=np.int32),
                np.frombuffer(per_row, dtype=np.int64))

    def _scan(self, texts: Sequence[str]) -> tuple[bytearray, bytearray, list[str], list[str | None] | None]:
        """Look ``texts``' chunks up (adding the new ones): each chunk's id, the chunks per text, the new chunks and
        the terms of those that are plain words (None for the others; the list None without :class:`PlainWords`)."""
        return self._table.scan(texts)

    def _analysed(self, scanned: tuple[bytearray, bytearray, list[str], list[str | None] | None]) -> Scanned:
        """A scan, after its new chunks are analysed and their terms stored."""
        occurrences, per_text, new, words = scanned
        if new:  # a failure leaves these chunks without terms: the caller empties the table
            analyse = self._analyse
            if words is None:
                found = list(map(analyse, new))
            else:
                term_ids = self._words.term_ids
                found = [analyse(chunk) if word is None else term_ids(word) for chunk, word in zip(new, words)]
            self._table.set_terms(found)
        return Scanned(occurrences, per_text)


class NumpyChunkTable:
    """Chunk -> term ids over the lifetime of the table; ``analyse(chunk)`` gives a new chunk's term ids.

    ``analyse`` must depend on the chunk's text alone, and a chunk is never empty and never holds a
    separator byte (:data:`SEPARATOR_BYTES`).
    """

    def __init__(self, analyse: Callable[[str], tuple[int, ...]]) -> None:
        self._analyse = analyse
        self.clear()

    def clear(self) -> None:
        """Forget every chunk."""
        self._bits = _FIRST_BITS
        size = 1 << self._bits
        self._k1 = np.zeros(size, dtype=np.uint64)  # 0: a free slot (a chunk's first byte is never 0)
        self._k2 = np.zeros(size, dtype=np.uint64)
        self._chunk_of_slot = np.full(size, -1, dtype=np.int64)
        self._claim = np.zeros(size, dtype=np.int64)  # scratch: which key won a free slot
        self._used = 0
        self._long: dict[bytes, int] = {}
        self._term_start = np.zeros(1024, dtype=np.int64)  # chunk id -> its term ids in self._terms
        self._term_count = np.zeros(1024, dtype=np.int64)
        self._terms = np.zeros(4096, dtype=np.int64)
        self._n_chunks = 0
        self._n_terms = 0

    def __len__(self) -> int:
        """The number of distinct chunks seen."""
        return self._n_chunks

    def term_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The term id of every token of ``texts`` (flat, in order) and the number of tokens of each text."""
        n_texts = len(texts)
        if n_texts == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        data, sizes = _encode(texts)
        # a leading separator, and separators after the end for the 16-byte reads
        buffer = b"\n" + data + b"\0" * (_SHORT + 8)
        raw = np.frombuffer(buffer, dtype=np.uint8)
        sep = raw <= 0x20  # SEPARATOR_BYTES: these and DEL, which is rare (memchr finds whether it is there)
        if buffer.find(b"\x7f") >= 0:
            sep |= raw == 0x7F
        # the buffer starts and ends with separators, so its changes alternate: chunk start, chunk end, ...
        changes = np.flatnonzero(sep[1:] != sep[:-1]) + 1
        del sep
        starts, ends = changes[0::2], changes[1::2]
        text_starts = np.empty(n_texts + 1, dtype=np.int64)
        text_starts[0] = 1
        np.cumsum(sizes + 1, out=text_starts[1:])
        text_starts[1:] += 1
        chunk_bounds = np.searchsorted(starts, text_starts)  # the chunks of text i: chunk_bounds[i]:chunk_bounds[i+1]

        lengths = ends - starts
        long = np.flatnonzero(lengths > _SHORT)  # about 1 chunk in 100: their positions, not masks over all chunks
        chunk = self._short_chunks(raw, buffer, starts, lengths, long)
        if len(long):
            chunk[long] = self._long_chunks(buffer, starts[long], ends[long])

        count = self._term_count[chunk]
        ends_of_terms = np.cumsum(count)
        total = int(ends_of_terms[-1]) if len(count) else 0
        at = np.zeros(len(count) + 1, dtype=np.int64)
        at[1:] = ends_of_terms
        per_text = at[chunk_bounds[1:]] - at[chunk_bounds[:-1]]
        first = self._term_start[chunk]
        if total == len(count) and (count == 1).all():
            ids = self._terms[first]
        else:
            ids = self._terms[np.repeat(first - at[:-1], count) + np.arange(total, dtype=np.int64)]
        return ids, per_text

    # ------------------------------------------------------------------ short chunks: the hash table

    def _short_chunks(
        self, raw: np.ndarray, buffer: bytes, starts: np.ndarray, lengths: np.ndarray, skip: np.ndarray
    ) -> np.ndarray:
        """Chunk ids of the chunks of at most 16 bytes, adding the new ones; the positions ``skip`` (the longer
        chunks, which the caller fills in) hold -1."""
        # every byte offset of the buffer read as a little-endian 64-bit word (unaligned, no copy)
        words = np.ndarray(shape=(len(raw) - 8,), dtype="<u8", buffer=buffer, offset=0, strides=(1,))
        k1 = words[starts] & _MASK_1.take(lengths, mode="clip")
        k2 = words[starts + 8] & _MASK_2.take(lengths, mode="clip")
        if len(skip):  # one key no chunk has (UTF-8 has no byte 0xFF): it takes a slot whose chunk id stays -1
            k1[skip] = _NO_CHUNK
            k2[skip] = _NO_CHUNK
        while True:
            slots = self._insert(k1, k2)
            if slots is not None:
                break
            self._grow()
        chunk = self._chunk_of_slot[slots]
        new = np.flatnonzero(chunk < 0)
        if len(skip):
            new = new[k1[new] != _NO_CHUNK]
        if len(new):
            marked = np.zeros(len(self._k1), dtype=bool)
            marked[slots[new]] = True
            new_slots = np.flatnonzero(marked)
            self._claim[slots[new]] = new  # for each new slot, one position of this batch that holds its key
            first = self._claim[new_slots]
            texts = [buffer[s:s + n].decode("utf-8", "surrogatepass")
                     for s, n in zip(starts[first].tolist(), lengths[first].tolist())]
            self._chunk_of_slot[new_slots] = self._add_chunks(texts)
            chunk = self._chunk_of_slot[slots]
        return chunk

    def _insert(self, k1: np.ndarray, k2: np.ndarray) -> np.ndarray | None:
        """The slot of every key, claiming free slots for new keys (linear probing, all keys at once).

        ``None`` when the table grew past three quarters full: grow it and insert again.
        """
        mask = len(self._k1) - 1
        slots = _mix(k1, k2, self._bits)  # the home slot of every key; then where it was found
        pending: np.ndarray | None = None  # positions still probing (None: all, in the first round)
        probe, keys1, keys2 = slots, k1, k2
        while True:
            current = self._k1[probe]
            free = current == 0
            if free.any():
                claimed = probe[free]
                self._claim[claimed] = np.flatnonzero(free) if pending is None else pending[free]
                winner = self._claim[claimed]  # one key wins each free slot
                self._k1[claimed] = k1[winner]
                self._k2[claimed] = k2[winner]
                self._used = int(np.count_nonzero(self._k1))
                if 4 * self._used > 3 * len(self._k1):
                    return None
                current = self._k1[probe]
            miss = (current != keys1) | (self._k2[probe] != keys2)
            if pending is not None:
                hit = ~miss
                slots[pending[hit]] = probe[hit]
            if not miss.any():
                return slots
            pending = np.flatnonzero(miss) if pending is None else pending[miss]
            probe = (probe[miss] + 1) & mask
            keys1, keys2 = k1[pending], k2[pending]

    def _grow(self) -> None:
        """Double the table twice and re-insert the chunks it holds (their chunk ids do not change)."""
        held = np.flatnonzero(self._k1)
        k1, k2, chunk = self._k1[held], self._k2[held], self._chunk_of_slot[held]
        self._bits += 2
        size = 1 << self._bits
        self._k1 = np.zeros(size, dtype=np.uint64)
        self._k2 = np.zeros(size, dtype=np.uint64)
        self._chunk_of_slot = np.full(size, -1, dtype=np.int64)
        self._claim = np.zeros(size, dtype=np.int64)
        slots = self._insert(k1, k2)
        assert slots is not None  # a quarter full at most
        self._chunk_of_slot[slots] = chunk

    # ------------------------------------------------------------------ long chunks and chunk storage

    def _long_chunks(self, buffer: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Chunk ids of chunks longer than 16 bytes, through a dict of their bytes."""
        known = self._long
        keys = [buffer[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
        found = list(map(known.get, keys))  # the lookups in C; None for a chunk not seen before
        if None not in found:
            return np.array(found, dtype=np.int64)
        out = np.empty(len(starts), dtype=np.int64)
        new: dict[bytes, int] = {}  # new chunk -> -1 - its position in the batch's new chunks
        for i, key in enumerate(keys):
            if found[i] is None:
                found[i] = new.setdefault(key, -1 - len(new))
        out[:] = found
        if new:
            ids = self._add_chunks([key.decode("utf-8", "surrogatepass") for key in new])
            known.update(zip(new, ids.tolist()))
            provisional = out < 0
            out[provisional] = ids[-1 - out[provisional]]
        return out

    def _add_chunks(self, chunks: list[str]) -> np.ndarray:
        """Analyse new chunks; their chunk ids."""
        analyse = self._analyse
        found = [analyse(c) for c in chunks]
        counts = np.fromiter(map(len, found), dtype=np.int64, count=len(found))
        flat = [i for terms in found for i in terms]
        first_chunk, n_new = self._n_chunks, len(chunks)
        self._term_start = _fit(self._term_start, first_chunk + n_new)
        self._term_count = _fit(self._term_count, first_chunk + n_new)
        self._terms = _fit(self._terms, self._n_terms + len(flat))
        starts = np.zeros(n_new, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        self._term_start[first_chunk:first_chunk + n_new] = starts + self._n_terms
        self._term_count[first_chunk:first_chunk + n_new] = counts
        self._terms[self._n_terms:self._n_terms + len(flat)] = flat
        self._n_chunks += n_new
        self._n_terms += len(flat)
        return np.arange(first_chunk, first_chunk + n_new, dtype=np.int64)


def _fit(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, grown (at least doubled) to hold ``size`` items."""
    if size <= len(array):
        return array
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[:len(array)] = array
    return grown
