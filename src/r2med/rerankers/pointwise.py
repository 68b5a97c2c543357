"""Pointwise reranking: score every (query, document) pair of the top k, sort, through the score cache.

A ``PairScorer`` (a cross-encoder, RankLLaMA) turns batches of pairs into scores and describes
itself (model, weights, max length, template, dtype) so its scores can be cached by content.
``PointwiseReranker`` gathers the pairs of every query's top k, looks each up in the cache, sends
only the missing ones to the scorer (longest first, so batches carry little padding), stores them
as it goes, and orders each query's top k by score (ties keep the first-stage order). A rerun
with the same model and texts loads nothing and scores nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from r2med.batching import TokenBudget
from r2med.errors import ProviderError, UsageError
from r2med.io.progress import progress_bar
from r2med.rerankers.base import Reranked, assemble, check_texts, check_top_k, order_by_scores, split_head
from r2med.rerankers.score_cache import ScoreCache, pair_key
from r2med.types import Run

logger = logging.getLogger(__name__)

class PairScorer(Protocol):
    """Scores (query, document) pairs; ``describe()`` is everything its scores depend on (JSON-able)."""

    def describe(self) -> dict[str, Any]: ...

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]: ...


@runtime_checkable
class ServedScorer(PairScorer, Protocol):
    """A ``PairScorer`` whose pairs are requests to an LLM server (Rank1, Qwen3-Reranker via a server): ``sent()`` is
    its client's cumulative ``(HTTP requests, prompt tokens, completion tokens)``; ``pair_tokens`` the ``(prompt,
    completion)`` tokens of a pair's requests as their responses record them (None when a response is not at hand)."""

    def sent(self) -> tuple[int, int, int]: ...

    def pair_tokens(self, query: str, document: str) -> tuple[int, int] | None: ...


@runtime_checkable
class FinishingScorer(PairScorer, Protocol):
    """A ``PairScorer`` with something to say once a rerank's pairs are all scored (Rank1: how many got its fallback
    score): ``finish()`` is called then, once per rerank that scored pairs."""

    def finish(self) -> None: ...


@dataclass(frozen=True)
class PointwiseStats:
    """Pairs in the top k of all queries, how many distinct ones were found in the cache, how many were scored."""

    pairs: int
    cached: int
    scored: int


@dataclass(frozen=True)
class ServedStats(PointwiseStats):
    """``PointwiseStats`` of a ``ServedScorer``, with what it cost (``r2med.rerankers.base.cost_line``): ``queries``;
    the HTTP requests (retries included) and tokens this call sent; the tokens of every distinct pair of the result,
    the ones found in a cache as their responses recorded them (``result_*``); ``unknown``: distinct pairs whose
    responses are in no cache (scored earlier, their response cache since removed), left out of ``result_*``."""

    queries: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    result_prompt_tokens: int
    result_completion_tokens: int
    unknown: int = 0


@dataclass
class PointwiseReranker:
    """Rerank with a ``PairScorer``; ``cache_dir`` (None: no cache) holds one score file per scorer."""

    name: str
    scorer: PairScorer
    batch_size: int = 32
    cache_dir: Path | None = None
    progress: bool = True
    flush_every: int = 1024

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError(f"the batch size must be at least 1, got {self.batch_size}")

    def describe(self) -> dict[str, Any]:
        """What determines this reranker's output: the scorer's description (ties keep the first-stage order)."""
        return {"kind": "pointwise", "name": self.name, "scorer": self.scorer.describe()}

    def rerank(self, queries: Mapping[str, str], corpus: Mapping[str, str], run: Run, *, top_k: int = 100) -> Run:
        """Reorder each query's first ``top_k`` documents by the scorer's score (see ``base`` for the run's scores)."""
        check_top_k(top_k)
        check_texts(queries, corpus, run, top_k)
        heads = {qid: split_head(run, qid, top_k)[0] for qid in run}
        keys = {qid: [pair_key(queries[qid], corpus[doc]) for doc in head] for qid, head in heads.items()}
        todo: dict[str, tuple[str, str]] = {}
        for qid, head in heads.items():
            for doc, key in zip(head, keys[qid]):
                todo.setdefault(key, (queries[qid], corpus[doc]))
        cache = ScoreCache.open(self.cache_dir, self.scorer.describe()) if self.cache_dir is not None else None
        scores: dict[str, float] = {}
        if cache is not None:
            for key in list(todo):
                hit = cache.get(key)
                if hit is not None:
                    scores[key] = hit
                    del todo[key]
        total = sum(len(k) for k in keys.values())
        stats = PointwiseStats(total, len(scores), len(todo))
        logger.info("%s: %d pairs, %d distinct found in the cache, %d to score", self.name, total, len(scores), len(todo))
        served = isinstance(self.scorer, ServedScorer)
        before = self.scorer.sent() if served else (0, 0, 0)
        texts = {**todo}
        for qid, head in heads.items():
            for doc, key in zip(head, keys[qid]):
                texts.setdefault(key, (queries[qid], corpus[doc]))
        if todo:
            scores.update(self._score(todo, cache))
        if served:
            stats = self._served_stats(stats, len(heads), texts, before)
        orders = {qid: order_by_scores(head, [scores[key] for key in keys[qid]]) for qid, head in heads.items()}
        return Reranked(assemble(run, orders, top_k, name=self.name), name=self.name, stats=stats)

    def _served_stats(self, stats: PointwiseStats, queries: int, texts: Mapping[str, tuple[str, str]],
                      before: tuple[int, int, int]) -> ServedStats:
        """What a ``ServedScorer``'s result cost: the tokens of every distinct pair, and what this call sent."""
        scorer: Any = self.scorer
        prompt = completion = unknown = 0
        for query, document in texts.values():
            tokens = scorer.pair_tokens(query, document)
            if tokens is None:
                unknown += 1
                continue
            prompt += tokens[0]
            completion += tokens[1]
        after = scorer.sent()
        if unknown:
            logger.warning("%s: the tokens of %d of %d pairs are not known (scored earlier; their responses are in no "
                           "cache): the cost per query leaves them out", self.name, unknown, len(texts))
        return ServedStats(stats.pairs, stats.cached, stats.scored, queries=queries,
                           requests=after[0] - before[0], prompt_tokens=after[1] - before[1],
                           completion_tokens=after[2] - before[2], result_prompt_tokens=prompt,
                           result_completion_tokens=completion, unknown=unknown)

    def _score(self, todo: dict[str, tuple[str, str]], cache: ScoreCache | None) -> dict[str, float]:
        # longest first: batches of similar length carry little padding, and an out-of-memory error comes early; a
        # server's pairs go query by query instead (the first-stage order), so that consecutive requests share the
        # query's part of the prompt and a server's prefix cache (vLLM, llama.cpp) reuses it
        items = list(todo.items())
        if not isinstance(self.scorer, ServedScorer):
            items.sort(key=lambda item: -(len(item[1][0]) + len(item[1][1])))
        out: dict[str, float] = {}
        pending: dict[str, float] = {}
        bar = progress_bar(len(items), desc=f"reranking ({self.name})", unit="pair", enabled=self.progress)
        # a model on this machine (a ``token_budget``) gets groups of pairs and cuts them into batches by tokens,
        # ``batch_size`` pairs at most (r2med.batching); any other scorer gets batches of ``batch_size`` pairs
        budget = getattr(self.scorer, "token_budget", None)
        step = self.batch_size
        if isinstance(budget, TokenBudget):
            budget.texts = self.batch_size
            step = max(self.batch_size, self.flush_every)
        try:
            for start in range(0, len(items), step):
                batch = items[start:start + step]
                values = self.scorer.score([q for _, (q, _) in batch], [d for _, (_, d) in batch])
                if len(values) != len(batch):
                    raise RuntimeError(f"the scorer returned {len(values)} scores for {len(batch)} pairs")
                for (key, (query, _)), value in zip(batch, values):
                    if math.isnan(float(value)):
                        raise ProviderError(
                            f"{self.name} scored a pair of query {query[:60]!r} as NaN (a half-precision overflow?); "
                            "rerun with --dtype float32"
                        )
                    out[key] = pending[key] = float(value)
                if cache is not None and len(pending) >= self.flush_every:
                    cache.put_many(pending)
                    pending = {}
                bar.update(len(batch))
        finally:  # what was scored before a failure is kept, so a rerun resumes
            bar.close()
            if cache is not None:
                cache.put_many(pending)
        if isinstance(self.scorer, FinishingScorer):  # after the progress bar, once
            self.scorer.finish()
        return out
