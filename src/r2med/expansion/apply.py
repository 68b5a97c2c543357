"""Turn a dataset's expansions into the queries a retriever searches with.

:func:`prepare_queries` decides, per query, the query text and the expansion text, exactly as the official
evaluation did: the query text is the one stored in the expansion file (the authors' code read it from
there), and a reasoning model's output is cut to its answer (:mod:`r2med.llm.reasoning`). What
happens to an output with no usable answer (a trace cut off before it, an empty answer, an empty expansion)
is the answer ``policy``: "fallback" (default: the plain query, counted), "authors" (the official
behaviour: the whole text) or "error". Nothing empty is ever used as a query silently. A plain model's
expansion is used byte for byte under every policy, surrounding whitespace included, as the official code
used ``hy_doc`` (docs/expansion-policies.md lists every difference between the policies).

:func:`bm25_queries` composes them into BM25's text queries (:mod:`r2med.expansion.compose`); each retriever's
``retrieve_expanded`` searches with them (BM25: those text queries; dense: the query/expansion embeddings).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from r2med.datasets.model import Dataset
from r2med.errors import InvalidInputError, ProviderError, UsageError
from r2med.expansion.compose import BM25_COMPOSITIONS, bm25_query_for
from r2med.expansion.published import Expansions
from r2med.llm.reasoning import POLICIES, choose_answer, split_reasoning, style_for_llm

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedQueries:
    """Per query id (in dataset order): the query text, the expansion to use, and what was done."""

    method: str
    llm: str
    style: str
    queries: dict[str, str]
    expansions: dict[str, str]
    fell_back: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    text_differs: list[str] = field(default_factory=list)

    @property
    def reasoning(self) -> bool:
        """Whether the expansions are reasoning-model outputs (the official ``r1_mode``)."""
        return self.style != "plain"

    def summary(self) -> dict[str, int]:
        return {
            "queries": len(self.queries),
            "fell_back": len(self.fell_back),
            "truncated": len(self.truncated),
            "text_differs": len(self.text_differs),
        }


def prepare_queries(dataset: Dataset, expansions: Expansions, *, policy: str = "fallback", style: str | None = None) -> PreparedQueries:
    """Query and expansion text for every query of ``dataset``.

    Every query of the dataset needs an expansion: a missing one is an error naming the file and the first
    ids, because the official numbers averaged over the file's queries and a silent plain query would change
    them. ``style`` defaults to the LLM's (``style_for_llm(llm, method)``).

    >>> from pathlib import Path
    >>> ds = Dataset("D", ["d1"], ["x"], {"q1": "why", "q2": "how"}, {})
    >>> exp = Expansions("hyde", "r1-qwen-32b", {"q1": "<think>hm</think> because", "q2": "<think>hm"}, {}, Path("f"), "")
    >>> prepared = prepare_queries(ds, exp)
    >>> prepared.expansions, prepared.fell_back, prepared.truncated
    ({'q1': 'because', 'q2': 'how'}, ['q2'], ['q2'])
    >>> prepare_queries(ds, exp, policy="authors").expansions["q2"]
    '<think>hm'
    """
    if policy not in POLICIES:
        raise UsageError(f"unknown answer policy {policy!r}; valid: {', '.join(POLICIES)}")
    missing = [qid for qid in dataset.queries if qid not in expansions.hy_docs]
    if missing:
        raise InvalidInputError(
            f"{expansions.path}: {len(missing)} of {len(dataset.queries)} queries of {dataset.name} have no expansion "
            f"(e.g. {', '.join(repr(q) for q in missing[:5])}); regenerate them with 'r2med expand' (it requests only "
            "the missing ones) or use a complete file"
        )
    style = style or style_for_llm(expansions.llm, method=expansions.method)
    queries: dict[str, str] = {}
    chosen: dict[str, str] = {}
    fell_back, truncated, differs = [], [], []
    for qid, own_text in dataset.queries.items():
        text = expansions.texts.get(qid, own_text)
        if text != own_text:
            differs.append(qid)
        raw = expansions.hy_docs[qid]
        # a row r2med expand wrote already holds the chosen answer: no second cut
        parsed = split_reasoning(raw, style="plain" if qid in expansions.answered else style)
        if parsed.truncated:
            truncated.append(qid)
        try:
            answer, fell = choose_answer(parsed, fallback=text, policy=policy)
        except ProviderError as exc:
            raise ProviderError(f"{expansions.path}: query {qid!r}: {exc}") from None
        if policy == "authors" and not answer.strip():
            raise InvalidInputError(
                f"{expansions.path}: query {qid!r} has an empty expansion; the answer policy 'authors' would search "
                "with an empty query. Use --answer-policy fallback (the plain query) or regenerate it"
            )
        if fell:
            fell_back.append(qid)
        queries[qid] = text
        chosen[qid] = answer
    if differs:
        logger.warning(
            "%s: %d queries' text in %s differs from the dataset's (e.g. %r); the file's text is used, as the official code did",
            dataset.name, len(differs), expansions.path, differs[0],
        )
    if fell_back:
        logger.warning(
            "%s: %d of %d %s expansions had no usable answer (%d traces cut off); those queries are searched with the plain query",
            dataset.name, len(fell_back), len(queries), expansions.spec, len(truncated),
        )
    return PreparedQueries(expansions.method, expansions.llm, style, queries, chosen, fell_back, truncated, differs)


def bm25_queries(prepared: PreparedQueries, *, composition: str | None = None) -> dict[str, str]:
    """The BM25 query text of every query; ``composition`` defaults to the method's official one.

    >>> p = PreparedQueries("query2doc", "gpt4", "plain", {"q": "a b"}, {"q": "c"})
    >>> bm25_queries(p), bm25_queries(p, composition="query2doc-spaced")
    ({'q': 'a ba b c'}, {'q': 'a b a b c'})
    """
    name = composition or prepared.method
    spec = BM25_COMPOSITIONS.get(name)
    if spec is None:
        raise UsageError(f"unknown BM25 composition {name!r}; valid: {', '.join(BM25_COMPOSITIONS)}")
    if spec.method != prepared.method:
        raise UsageError(f"BM25 composition {name!r} is for {spec.method} expansions, not {prepared.method}")
    return {
        qid: bm25_query_for(name, text, prepared.expansions[qid], reasoning=prepared.reasoning)
        for qid, text in prepared.queries.items()
    }

