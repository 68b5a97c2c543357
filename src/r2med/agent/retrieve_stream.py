"""A ``/retrieve`` answer in bounded memory: hits held as two arrays, the JSON encoded as the client reads it.

Encoding the whole answer at once (``json.dumps`` of up to ``--max-response`` bytes, 32 MiB) held its text, its
bytes and, for a client that does not read, a copy in the connection's write buffer: about 27-38 MB a connection
for 13 queries at ``topk`` 1000 on SciFact, gigabytes for a few hundred clients that never read. Here:

- a request's hits are searched ``SEARCH_ENTRIES`` hits at a time and held as document positions and scores
  (:class:`Hits`: 16 bytes a hit; a repeated query text is searched once and its hits shared);
- the answer's length is known before its first byte (:meth:`StreamedAnswer.length`, sent as Content-Length), from
  each document's JSON size, computed once per corpus (:class:`CorpusEntries`);
- the bytes are made ``ANSWER_CHUNK`` at a time by a generator (:meth:`StreamedAnswer.chunks`) that the server
  advances only when the connection has taken the previous chunk (uvicorn's flow control pauses the sender while
  its write buffer holds more than 64 KiB), so a client that does not read holds one chunk and the arrays.

The bytes are exactly those of ``json.dumps(retrieve(...), ensure_ascii=False).encode("utf-8")``
(:func:`r2med.agent.retrieve_api.retrieve`), which a test checks.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from json.encoder import encode_basestring  # json.dumps(text, ensure_ascii=False) of one string (C, when built)

from r2med.agent.search import CorpusSearcher, search_r1_contents

#: hits searched at once (``topk`` of them a query): a search's lists of ``(docid, score)`` tuples take about
#: 150 bytes a hit before they are packed into :class:`Hits`
SEARCH_ENTRIES = 1 << 15
#: bytes of one piece of an answer handed to the server
ANSWER_CHUNK = 1 << 16
#: JSON bytes of an entry besides its id, its contents and its score: ``{"document": {"id": , "contents": },
#: "score": }`` (20 + 14 + 12 + 1) with scores, ``{"id": , "contents": }`` (7 + 14 + 1) without
SCORED_OVERHEAD, PLAIN_OVERHEAD = 47, 22
#: ``{"result": [`` and ``]}``
ANSWER_OPEN, ANSWER_CLOSE = b'{"result": [', b"]}"


def _json_size(text: str) -> int:
    return len(encode_basestring(text).encode("utf-8"))


def score_text(score: float) -> str:
    """A score as ``json.dumps`` writes it.

    >>> score_text(36.40243911743164), score_text(1e-07), score_text(float("nan"))
    ('36.40243911743164', '1e-07', 'NaN')
    """
    return json.dumps(score)


class CorpusEntries:
    """What a corpus's answers are made of, computed once: the ids in order, each id's position, and each document's
    JSON size in an answer (its id and its ``search_r1_contents``, as JSON strings, in UTF-8 bytes)."""

    def __init__(self, documents: dict[str, str]) -> None:
        self.documents = documents
        self.ids = list(documents)
        self.position = {docid: i for i, docid in enumerate(self.ids)}
        self.sizes = array("q", (_json_size(docid) + _json_size(search_r1_contents(docid, text))
                                 for docid, text in documents.items()))


class Hits:
    """One query's ranked hits: ``positions`` (into :attr:`CorpusEntries.ids`) and ``scores``, best first."""

    __slots__ = ("positions", "scores")

    def __init__(self, positions: array, scores: array) -> None:
        self.positions, self.scores = positions, scores


def search_hits(searcher: CorpusSearcher, entries: CorpusEntries, queries: Sequence[str], topk: int) -> list[Hits]:
    """Each query's top ``topk`` hits, searched ``SEARCH_ENTRIES // topk`` distinct texts at a time (at least one);
    a repeated text is searched once and its :class:`Hits` shared."""
    unique = list(dict.fromkeys(queries))
    step = max(1, SEARCH_ENTRIES // topk)
    found: dict[str, Hits] = {}
    position = entries.position
    for start in range(0, len(unique), step):
        batch = unique[start:start + step]
        for text, ranked in zip(batch, searcher.search(batch, topk)):
            found[text] = Hits(array("q", [position[docid] for docid, _ in ranked]),
                               array("d", [score for _, score in ranked]))
    return [found[query] for query in queries]


class StreamedAnswer:
    """The ``/retrieve`` answer of ``hits`` (one :class:`Hits` a query): its :attr:`length` in bytes, and its bytes
    in pieces of about ``ANSWER_CHUNK`` (:meth:`chunks`)."""

    def __init__(self, entries: CorpusEntries, hits: list[Hits], return_scores: bool) -> None:
        self.entries, self.hits, self.return_scores = entries, hits, return_scores
        self.length = self._length()

    def _length(self) -> int:
        sizes, overhead = self.entries.sizes, SCORED_OVERHEAD if self.return_scores else PLAIN_OVERHEAD
        total = len(ANSWER_OPEN) + len(ANSWER_CLOSE) + 2 * max(0, len(self.hits) - 1)  # ", " between lists
        seen: dict[int, int] = {}  # a repeated query's list: counted once, added each time
        for hits in self.hits:
            size = seen.get(id(hits))
            if size is None:
                n = len(hits.positions)
                size = 2 + 2 * max(0, n - 1) + n * overhead + sum(sizes[p] for p in hits.positions)  # [, ", ", ]
                if self.return_scores:
                    size += sum(len(score_text(s)) for s in hits.scores)
                seen[id(hits)] = size
            total += size
        return total

    def _entry(self, position: int, score: float) -> str:
        docid = self.entries.ids[position]
        plain = (f'{{"id": {encode_basestring(docid)}, "contents": '
                 f'{encode_basestring(search_r1_contents(docid, self.entries.documents[docid]))}}}')
        return f'{{"document": {plain}, "score": {score_text(score)}}}' if self.return_scores else plain

    def chunks(self) -> Iterator[bytes]:
        """The answer's bytes, in pieces of about ``ANSWER_CHUNK`` bytes (one entry may make a piece longer)."""
        pieces, size = [ANSWER_OPEN], len(ANSWER_OPEN)
        for number, hits in enumerate(self.hits):
            pieces.append(b", [" if number else b"[")
            for index, (position, score) in enumerate(zip(hits.positions, hits.scores)):
                piece = ((", " if index else "") + self._entry(position, score)).encode("utf-8")
                pieces.append(piece)
                size += len(piece)
                if size >= ANSWER_CHUNK:
                    yield b"".join(pieces)
                    pieces, size = [], 0
            pieces.append(b"]")
        pieces.append(ANSWER_CLOSE)
        yield b"".join(pieces)
