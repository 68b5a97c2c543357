"""Search through any Search-R1-compatible retrieval server (``r2med agent --search-with http://HOST:PORT/retrieve``).

The request ``{"queries": [...], "topk": k, "return_scores": true}`` and the answer ``{"result": [[{"document":
{"id", "contents"}, "score"}, ...], ...]}`` are Search-R1's (``search_r1/search/retrieval_server.py``; r2med serves
the same, ``r2med.agent.retrieve_api``). Every request goes through r2med's one HTTP stack (``r2med.http.JsonClient``):
the agent's ``--timeout`` deadline per attempt, its ``--max-retries``, the same classification of failures and the
same redaction as an LLM server's requests. An answer of the wrong shape is retried as a 5xx is.

:class:`ServerSearch` stands where a retriever stands in the agent stage: its ``name`` (the results folder) and
``describe`` (the resume key: the server's URL and, where it says on ``GET /health`` as ``r2med serve`` does, its
corpus, retriever and document count) make a different server a different result. The agent loop sends the
searches of concurrent queries together, one request at a time (``batched``; ``r2med.agent.loop``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from r2med.errors import MissingResourceError, R2MedError, UsageError
from r2med.http import BadAnswer, JsonClient, RetryPolicy, Secret, safe_url

logger = logging.getLogger(__name__)

#: what ``--search-with`` takes as a retrieval server (anything else is a retriever name)
URL_PREFIXES = ("http://", "https://")


def is_server_url(text: str) -> bool:
    """Whether a ``--search-with`` value names a retrieval server.

    >>> is_server_url("http://127.0.0.1:8000/retrieve"), is_server_url("bm25")
    (True, False)
    """
    return str(text).startswith(URL_PREFIXES)


def server_name(url: str) -> str:
    """The results-folder name of the server at ``url`` (its host, port and path, made safe).

    >>> server_name("http://127.0.0.1:8000/retrieve")
    'server-127.0.0.1_8000_retrieve'
    """
    parts = urlsplit(url)
    return "server-" + re.sub(r"[^A-Za-z0-9.]+", "_", f"{parts.hostname}:{parts.port or ''}{parts.path}").strip("_")


def _hits(answer: dict[str, Any], n: int) -> list[list[tuple[str, float, str]]]:
    """``(docid, score, contents)`` per query of a ``/retrieve`` answer to ``n`` queries; BadAnswer (retried) otherwise.

    >>> _hits({"result": [[{"document": {"id": "d1", "contents": '"d1"\\nx'}, "score": 2.5}]]}, 1)
    [[('d1', 2.5, '"d1"\\nx')]]
    >>> _hits({"result": []}, 1)
    Traceback (most recent call last):
    ...
    r2med.http.retry.BadAnswer: the answer is not Search-R1's {"result": [one list per query]} for 1 queries: {"result": []}
    """
    import json

    result = answer.get("result")
    shown = json.dumps(answer)[:200]
    if not isinstance(result, list) or len(result) != n:
        raise BadAnswer(f'the answer is not Search-R1\'s {{"result": [one list per query]}} for {n} queries: {shown}')
    out = []
    for ranked in result:
        if not isinstance(ranked, list):
            raise BadAnswer(f"a query's results are not a list: {shown}")
        rows = []
        for entry in ranked:
            document = entry.get("document") if isinstance(entry, dict) else None
            score = entry.get("score") if isinstance(entry, dict) else None
            if (not isinstance(document, dict) or not isinstance(document.get("id"), str | int)
                    or not isinstance(document.get("contents"), str) or isinstance(score, bool)
                    or not isinstance(score, int | float)):
                raise BadAnswer('each result must be {"document": {"id", "contents"}, "score": number} (the request '
                                f"asks for return_scores): {json.dumps(entry)[:200]}")
            rows.append((str(document["id"]), float(score), document["contents"]))
        out.append(rows)
    return out


class ServerSearch:
    """Searches at a retrieval server's ``/retrieve`` URL with the agent's ``timeout`` and ``max_retries``."""

    batched = True
    ignore_identical_ids = False

    def __init__(self, url: str, *, timeout: float = 300.0, max_retries: int = 5, backoff: float = 1.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise UsageError(f"--search-with {url}: a retrieval server is http(s)://HOST:PORT/retrieve (Search-R1's "
                             "retrieval_server.py or r2med serve)")
        self.url = url.rstrip("/")
        self.name = server_name(self.url)
        base, _, self.path = self.url.rpartition("/")
        if "//" not in base:  # no path: POST to the address itself
            base, self.path = self.url, ""
        self.timeout = timeout
        self._http = JsonClient(base, label="retrieval server", secret=Secret(None), timeout=timeout,
                                policy=RetryPolicy(max_retries=max_retries, base_delay=backoff))
        self.contents: dict[str, str] = {}  # docid -> contents as the server sent them
        self._health: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"ServerSearch({safe_url(self.url)!r})"

    async def asearch(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """The top ``k`` ``(docid, score)`` of each text, in one request."""
        texts = list(texts)
        payload = {"queries": texts, "topk": k, "return_scores": True}
        try:
            found = await self._http.apost(self.path, payload, parse=lambda answer, _: _hits(answer, len(texts)))
        except MissingResourceError as exc:
            why = str(exc).split("; start the server", 1)[0]
            raise MissingResourceError(f"{why}; start the retrieval server first (r2med serve, or Search-R1's "
                                       "retrieval_launch.sh) and pass its address as --search-with "
                                       "http://HOST:PORT/retrieve") from None
        out = []
        for ranked in found:
            for docid, _, contents in ranked:
                self.contents[docid] = contents
            out.append([(docid, score) for docid, score, _ in ranked])
        return out

    def text(self, docid: str) -> str:
        """A returned document's text: its contents without the ``"docid"`` title line r2med serve writes (Search-R1's
        own corpora keep their title line)."""
        contents = self.contents[docid]
        head = f'"{docid}"\n'
        return contents.removeprefix(head)

    def health(self) -> dict[str, Any]:
        """What the server says of itself on ``GET /health`` (r2med serve: corpus, retriever, documents), or ``{}``
        (Search-R1's server has no such page; an unreachable one fails later, on its first search). Best effort,
        through the searches' HTTP stack: their ``timeout`` for the whole of each attempt, their retries, an answer
        of at most 1 MiB, and the key of a ``user:password@`` URL (and its ``Basic`` token) cut out of every value."""
        if self._health is None:
            self._health = {}
            if self.url.endswith("/retrieve"):
                keys = ("corpus", "source", "retriever", "documents")
                try:
                    self._health = self._http.get("health", max_bytes=2**20,
                                                  parse=lambda body, _: {k: body[k] for k in keys if k in body})
                except R2MedError as exc:  # best effort: the identity is what the server says, when it says it
                    logger.info("%s: no identity from /health (%s)", safe_url(self.url), exc)
        return self._health

    def describe(self, corpus: str | None = None) -> dict[str, Any]:
        """The resume key: the server's URL and what it says it searches (a different server, another result)."""
        return {"server": safe_url(self.url), **self.health()}

    def config(self) -> dict[str, Any]:
        """What the summary and each trajectory record of the search."""
        return self.describe()

    async def aclose(self) -> None:
        await self._http.aclose()
