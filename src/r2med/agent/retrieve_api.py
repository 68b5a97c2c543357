"""Search-R1's retrieval API as data: a ``/retrieve`` request checked and answered (``r2med serve`` serves it).

The request ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}`` and the answer
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` are those of Search-R1's
``search_r1/search/retrieval_server.py``; :func:`parse_request` refuses anything else with the HTTP status
FastAPI would give (:class:`RequestError`); :class:`ResponseBound` is the most bytes an answer can take, known
before searching. The HTTP server is ``r2med.agent.server``.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from r2med.agent.search import CorpusSearcher, search_r1_contents

#: Search-R1's default top k (their retrieval_launch.sh: ``--topk 3``) and the limits of one request
DEFAULT_TOP_K = 3
MAX_TOP_K = 1000
MAX_QUERIES = 1024
#: the most bytes one answer may take (``r2med serve --max-response``): 32 MiB
MAX_RESPONSE = 32 << 20
#: JSON bytes of one result entry besides its id and contents: ``{"document": {"id": , "contents": }, "score": }``
#: (47), the longest float ``repr`` (24: ``-1.2345678901234567e-100``) and the ``, `` before the next entry (2)
ENTRY_OVERHEAD = 47 + 24 + 2
#: bytes of one query's list besides its entries (``[``, ``]``, ``, ``) and of the answer's ``{"result": [`` ``]}``
QUERY_OVERHEAD, ANSWER_OVERHEAD = 4, 14


class RequestError(Exception):
    """A request the server refuses: the HTTP ``status`` and the message of ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _kind(value: Any) -> str:
    """The JSON name of a decoded value's type (what an error says it got)."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def parse_request(payload: Any, *, default_top_k: int = DEFAULT_TOP_K, max_top_k: int = MAX_TOP_K,
                  max_queries: int = MAX_QUERIES) -> tuple[list[str], int, bool]:
    """``(queries, topk, return_scores)`` of a decoded ``/retrieve`` body, or :class:`RequestError`.

    >>> parse_request({"queries": ["aspirin"], "topk": None})
    (['aspirin'], 3, False)
    >>> parse_request({"queries": ["a", "b"], "topk": 5, "return_scores": True, "extra": 1})
    (['a', 'b'], 5, True)
    >>> parse_request({"queries": "aspirin"})
    Traceback (most recent call last):
    ...
    r2med.agent.retrieve_api.RequestError: 422: 'queries' must be a list of strings, got a string
    >>> parse_request({"queries": ["a"], "topk": 5000})
    Traceback (most recent call last):
    ...
    r2med.agent.retrieve_api.RequestError: 400: 'topk' must be between 1 and 1000 (0 or null: the server's default, 3), got 5000
    """
    if not isinstance(payload, dict):
        raise RequestError(422, 'the request body must be a JSON object {"queries": [str, ...], "topk": int, '
                                f'"return_scores": bool}}, got {_kind(payload)}')
    if "queries" not in payload:
        raise RequestError(422, "field 'queries' is required: a list of query strings")
    queries = payload["queries"]
    if not isinstance(queries, list):
        raise RequestError(422, f"'queries' must be a list of strings, got {_kind(queries)}")
    if len(queries) > max_queries:
        raise RequestError(413, f"{len(queries)} queries in one request; the limit is {max_queries} "
                                "(r2med serve --max-queries): send them in several requests")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise RequestError(422, f"'queries'[{i}] must be a string, got {_kind(query)}")
    topk = payload.get("topk")
    if isinstance(topk, float) and topk.is_integer():  # pydantic's int accepts 5.0
        topk = int(topk)
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int)):
        raise RequestError(422, f"'topk' must be a whole number or null, got {_kind(topk)} ({json.dumps(topk)})")
    if not topk:  # Search-R1: ``if not request.topk: request.topk = config.retrieval_topk``
        topk = default_top_k
    if not 1 <= topk <= max_top_k:
        raise RequestError(400, f"'topk' must be between 1 and {max_top_k} (0 or null: the server's default, "
                                f"{default_top_k}), got {topk}")
    return_scores = payload.get("return_scores")
    if return_scores is None:
        return_scores = False
    if not isinstance(return_scores, bool):
        raise RequestError(422, f"'return_scores' must be true or false, got {_kind(return_scores)}")
    return queries, topk, return_scores


def decode_body(body: bytes) -> Any:
    """The decoded JSON of a request body, or :class:`RequestError` 400 naming what is wrong with it.

    >>> decode_body(b'{"queries": ["a"]}')
    {'queries': ['a']}
    >>> decode_body(b'{"queries": ["\\xff"]}'.decode("unicode_escape").encode("latin-1"))
    Traceback (most recent call last):
    ...
    r2med.agent.retrieve_api.RequestError: 400: the request body is not UTF-8 text (invalid start byte at byte 14)
    """
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"the request body is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise RequestError(400, "the request body is not usable JSON: nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError, and integers past Python's digit limit
        raise RequestError(400, f"the request body is not valid JSON: {exc}") from None


def entry_bytes(docid: str, text: str) -> int:
    """The most UTF-8 bytes of one result entry of document ``docid`` (its JSON id and contents, plus
    ``ENTRY_OVERHEAD``), with or without its score.

    >>> entry_bytes("d1", "x")  # "d1" (4 bytes) and "\\"d1\\"\\nx" (11), the rest 73
    88
    >>> import json; len(json.dumps({"document": {"id": "d1", "contents": '"d1"\\nx'}, "score": -1.2345678901234567e-100})) + 2
    88
    """
    contents = search_r1_contents(docid, text)
    return (len(json.dumps(docid, ensure_ascii=False).encode("utf-8"))
            + len(json.dumps(contents, ensure_ascii=False).encode("utf-8")) + ENTRY_OVERHEAD)


class ResponseBound:
    """The most bytes a ``/retrieve`` answer over ``documents`` can take, known before searching.

    A query's list holds at most ``topk`` distinct documents, so its bytes are at most those of the corpus's
    ``topk`` largest entries (:func:`entry_bytes`); a request's, ``queries`` times that (a repeated query counts
    each time: the answer repeats its list). Only the ``max_top_k`` largest entries are kept.
    """

    def __init__(self, documents: dict[str, str], max_top_k: int, sizes: Iterable[int] | None = None) -> None:
        """``sizes``: each document's JSON id and contents in bytes, where known (``CorpusEntries.sizes``)."""
        each = ((size + ENTRY_OVERHEAD for size in sizes) if sizes is not None
                else (entry_bytes(docid, text) for docid, text in documents.items()))
        largest = heapq.nlargest(max_top_k, each)
        self._prefix = [0, *itertools.accumulate(largest)]  # _prefix[k]: the k largest entries together

    def query_bytes(self, topk: int) -> int:
        """The most bytes of one query's list of ``topk`` documents."""
        return self._prefix[min(topk, len(self._prefix) - 1)] + QUERY_OVERHEAD

    def bytes(self, queries: int, topk: int) -> int:
        """The most bytes of the answer to ``queries`` queries of ``topk`` documents each."""
        return queries * self.query_bytes(topk) + ANSWER_OVERHEAD if queries else len('{"result": []}')

    def check(self, queries: int, topk: int, max_response: int) -> None:
        """:class:`RequestError` 413 when the answer could pass ``max_response`` bytes, naming the bound and the fix.

        Entries of 3 + 109 + 73 and 3 + 10 + 73 bytes: 275 per query with the list's 4, 100 * 275 + 14 in all.

        >>> ResponseBound({"a": "x" * 100, "b": "y"}, max_top_k=10).check(100, 2, max_response=10_000)
        Traceback (most recent call last):
        ...
        r2med.agent.retrieve_api.RequestError: 413: the answer to 100 queries with topk 2 could take 27514 bytes (up to 275 per query: the 2 longest documents of the corpus); the limit is 10000 bytes (r2med serve --max-response): send at most 36 queries per request with this topk, or ask for a smaller topk
        """
        need = self.bytes(queries, topk)
        if need <= max_response:
            return
        per_query = self.query_bytes(topk)
        fit = max(0, (max_response - ANSWER_OVERHEAD) // per_query)
        shown = min(topk, len(self._prefix) - 1)
        raise RequestError(413, f"the answer to {queries} queries with topk {topk} could take {need} bytes (up to "
                                f"{per_query} per query: the {shown} longest documents of the corpus); the limit is "
                                f"{max_response} bytes (r2med serve --max-response): "
                                + (f"send at most {fit} queries per request with this topk, or ask for a smaller topk"
                                   if fit else "ask for a smaller topk"))


def retrieve(searcher: CorpusSearcher, queries: Sequence[str], topk: int, return_scores: bool) -> dict[str, Any]:
    """The ``/retrieve`` response to a parsed request: ``{"result": [one ranked list per query]}``.

    Each query text is searched once however often the request repeats it.
    """
    unique = list(dict.fromkeys(queries))
    ranked = dict(zip(unique, searcher.search(unique, topk))) if unique else {}
    documents = searcher.documents
    result = []
    for query in queries:
        hits: list[dict[str, Any]] = []
        for docid, score in ranked[query]:
            document = {"id": docid, "contents": search_r1_contents(docid, documents[docid])}
            hits.append({"document": document, "score": score} if return_scores else document)
        result.append(hits)
    return {"result": result}
