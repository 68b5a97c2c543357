"""Search-R1's retrieval API as data: a ``/retrieve`` request checked and answered (``r2med serve`` serves it).

The request ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}`` and the answer
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`` are those of Search-R1's
``search_r1/search/retrieval_server.py``; :func:`parse_request` refuses anything else with the HTTP status
FastAPI would give (:class:`RequestError`). The HTTP server is ``r2med.agent.server``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from r2med.agent.search import CorpusSearcher, search_r1_contents

#: Search-R1's default top k (their retrieval_launch.sh: ``--topk 3``) and the limits of one request
DEFAULT_TOP_K = 3
MAX_TOP_K = 1000
MAX_QUERIES = 1024


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
