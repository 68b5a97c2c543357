"""The reranker role, and how a reranked top k becomes a run.

A reranker maps ``(queries, corpus, run) -> run``: per query it reorders the first ``top_k``
documents of the first stage (``Run.ranked`` order) and leaves the rest where they were, below
them. It never adds, drops or repeats a document.

Scores of a reranked run are ranks, not model scores: with ``n`` documents for a query, the document
at 0-based position ``i`` of the new order scores ``float(n - i)`` (the first ``n``, the last ``1``).
They are strictly decreasing, so trec_eval, which sorts by score (ties by document id), and
``Run.ranked`` both see exactly the new order, and every reranked document outscores every
document below the top k. The model's own scores live in the score cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from r2med.errors import InvalidInputError, UsageError
from r2med.types import Run


@runtime_checkable
class Reranker(Protocol):
    """Reorders each query's first ``top_k`` documents; ``name`` is its results-folder name."""

    name: str

    def rerank(self, queries: Mapping[str, str], corpus: Mapping[str, str], run: Run, *, top_k: int = 100) -> Run: ...


class Reranked(Run):
    """A reranked run and what its reranker reports with it: ``stats`` (counts for the manifest: a dataclass or a
    dict), ``artifacts`` (``{"windows": [rows]}``: stored beside the result as ``<Dataset>.windows.jsonl``) and
    ``notes`` (``[(artifact, warning)]``: what to look at in an artifact; the runner logs each once the file is
    written, naming it, so that "see the window log" says where that log is).

    >>> r = Reranked({"q": {"a": 2.0}}, name="x", stats={"pairs": 1})
    >>> r.details(), dict(r), r.name
    ({'pairs': 1}, {'q': {'a': 2.0}}, 'x')
    """

    def __init__(self, *args, name: str = "r2med", stats: object = None,
                 artifacts: Mapping[str, Sequence[dict]] | None = None,
                 notes: Sequence[tuple[str, str]] = (), **kwargs) -> None:
        super().__init__(*args, name=name, **kwargs)
        self.stats = stats
        self.artifacts = {suffix: list(rows) for suffix, rows in (artifacts or {}).items() if rows}
        self.notes = [(suffix, note) for suffix, note in notes if suffix in self.artifacts]

    def details(self) -> dict | None:
        """``stats`` as a plain dict (None without stats)."""
        if self.stats is None:
            return None
        return dict(self.stats) if isinstance(self.stats, Mapping) else dict(vars(self.stats))


def check_top_k(top_k: int) -> int:
    """``top_k`` if it is a positive int; UsageError otherwise.

    >>> check_top_k(10)
    10
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise UsageError(f"the number of documents to rerank (--top-k) must be a positive integer, got {top_k!r}")
    return top_k


def split_head(run: Run, qid: str, top_k: int) -> tuple[list[str], list[str]]:
    """``(first top_k documents, the rest)`` of ``qid`` in ``Run.ranked`` order.

    >>> split_head(Run({"q": {"a": 1.0, "b": 3.0, "c": 2.0}}), "q", 2)
    (['b', 'c'], ['a'])
    """
    ranked = [doc for doc, _ in run.ranked(qid)]
    return ranked[:top_k], ranked[top_k:]


def ranked_scores(order: Sequence[str]) -> dict[str, float]:
    """Scores that encode ``order``: the ``i``-th of ``n`` documents scores ``n - i``.

    >>> ranked_scores(["x", "y", "z"])
    {'x': 3.0, 'y': 2.0, 'z': 1.0}
    """
    n = len(order)
    return {doc: float(n - i) for i, doc in enumerate(order)}


def order_by_scores(docs: Sequence[str], scores: Sequence[float]) -> list[str]:
    """``docs`` by score, highest first; equal scores keep their input (first-stage) order.

    >>> order_by_scores(["a", "b", "c", "d"], [0.1, 0.7, 0.1, 0.9])
    ['d', 'b', 'a', 'c']
    """
    if len(docs) != len(scores):
        raise ValueError(f"{len(docs)} documents but {len(scores)} scores")
    positions = sorted(range(len(docs)), key=lambda i: (-float(scores[i]), i))
    return [docs[i] for i in positions]


def check_texts(queries: Mapping[str, str], corpus: Mapping[str, str], run: Run, top_k: int) -> None:
    """InvalidInputError naming every query of ``run`` without a text, and every top-k document not in the corpus."""
    problems: list[str] = []
    for qid in run:
        if qid not in queries:
            problems.append(f"query {qid!r} of the run is not among the dataset's queries")
            continue
        head, _ = split_head(run, qid, top_k)
        problems.extend(f"document {doc!r} (query {qid!r}) is not in the corpus" for doc in head if doc not in corpus)
    if problems:
        raise InvalidInputError(
            f"the run {run.name!r} does not match the dataset ({len(problems)} problems); "
            "rerank a run made on the same dataset",
            problems,
        )


def assemble(run: Run, heads: Mapping[str, Sequence[str]], top_k: int, *, name: str) -> Run:
    """The reranked run: per query the new order of its head, then its untouched tail, scored by rank.

    A query missing from ``heads`` keeps its order. ValueError if a new head is not a permutation of the
    old one (a reranker bug: it must never drop or repeat a document).

    >>> run = Run({"q": {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}})
    >>> assemble(run, {"q": ["b", "a"]}, 2, name="x")["q"]
    {'b': 4.0, 'a': 3.0, 'c': 2.0, 'd': 1.0}
    """
    out = Run(name=name)
    for qid in run:
        head, tail = split_head(run, qid, top_k)
        new_head = list(heads.get(qid, head))
        if len(new_head) != len(head) or set(new_head) != set(head):
            raise ValueError(f"query {qid!r}: the reranked head {new_head} is not a permutation of {head}")
        out[qid] = ranked_scores(new_head + tail)
    return out


def cost_line(stats: Mapping[str, object] | None) -> str | None:
    """What an LLM reranker's result cost, from its stats (``ListwiseStats`` or ``ServedStats`` as a dict): tokens per
    query over every window (listwise) or distinct pair (pointwise) of the result (cached ones as recorded), and what
    this run sent; None for stats without token counts.

    >>> cost_line({"queries": 4, "windows": 36, "cached": 9, "requests": 28, "result_prompt_tokens": 40000,
    ...            "result_completion_tokens": 7202, "prompt_tokens": 30000, "completion_tokens": 5400})
    'cost per query: 10,000 prompt + 1,800 completion tokens (4 queries, 36 windows, 9 from the cache; this run sent 28 requests, 30,000 + 5,400 tokens)'
    >>> cost_line({"queries": 2, "pairs": 40, "cached": 0, "scored": 40, "requests": 60, "result_prompt_tokens": 5000,
    ...            "result_completion_tokens": 300, "prompt_tokens": 5000, "completion_tokens": 300, "unknown": 0})
    'cost per query: 2,500 prompt + 150 completion tokens (2 queries, 40 pairs, 0 from the cache; this run sent 60 requests, 5,000 + 300 tokens)'
    >>> cost_line({"pairs": 10}) is None
    True
    """
    if not stats or "result_prompt_tokens" not in stats:
        return None

    def num(key: str) -> int:
        value = stats.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    unit = "pairs" if "pairs" in stats else "windows"
    queries = max(num("queries"), 1)
    unknown = f"; the tokens of {num('unknown'):,} pairs are not known" if num("unknown") else ""
    return (f"cost per query: {num('result_prompt_tokens') / queries:,.0f} prompt + "
            f"{num('result_completion_tokens') / queries:,.0f} completion tokens ({num('queries')} queries, "
            f"{num(unit):,} {unit}, {num('cached'):,} from the cache; this run sent {num('requests'):,} requests, "
            f"{num('prompt_tokens'):,} + {num('completion_tokens'):,} tokens{unknown})")
