"""Rank1 (``jhu-clsp/rank1-*``): a reasoning reranker that thinks, then answers true or false, as its authors ran it.

From the authors' code (``orionw/rank1`` ``rank1.py``; every text is package data with its file:line, see
``r2med/data/pointwise_llm_prompts.json``):

1. The prompt (raw text, no chat template) is ``Determine if the following passage is relevant to the query. Answer
   only with 'true' or 'false'.\\nQuery: {query}\\nPassage: {passage}\\n<think>`` (``return_prompt``, lines 241-247;
   a dataset prompt with ``FILL_QUERY_HERE`` wraps the query, none for R2MED's datasets).
2. It is completed greedily (temperature 0) for at most 8192 tokens, stopping at ``</think> true`` or ``</think>
   false``, with the top 20 log-probabilities per token (lines 86-92). The score is ``exp(lp(" true")) /
   (exp(lp(" true")) + exp(lp(" false")))`` at the last generated position, when both tokens are among its
   logprobs (lines 200-219).
3. Otherwise (no stop string reached, or one token missing) the trace is cut to its last full sentence and the
   answer forced: ``{prompt}\\n{trace}\\n</think>`` completed by one token restricted to " true"/" false" (vLLM's
   ``allowed_token_ids``), read the same way (lines 112-156); an answer without both tokens scores 0.5.

Over an OpenAI-compatible server the token ids are not known, so the two tokens are found by their text in the top
logprobs; ``allowed_token_ids`` is sent in the forced step only when their ids are given (``answer_token_ids``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from r2med.errors import UsageError
from r2med.llm.client import SamplingParams
from r2med.rerankers.completions import CompletionRequests, TextRequest, fact, tokens_of, two_way

logger = logging.getLogger(__name__)

TASK = "rerank-rank1/1"
ENDS = (".", "!", "?")


def rank1_prompt(query: str, passage: str, dataset_prompt: str | None = None) -> str:
    """The authors' prompt for one pair (``return_prompt``); ``dataset_prompt`` puts the query at ``FILL_QUERY_HERE``.

    >>> rank1_prompt("Is aspirin an NSAID?", "Aspirin is a nonsteroidal anti-inflammatory drug.")
    "Determine if the following passage is relevant to the query. Answer only with 'true' or 'false'.\\nQuery: Is aspirin an NSAID?\\nPassage: Aspirin is a nonsteroidal anti-inflammatory drug.\\n<think>"
    """
    if dataset_prompt:
        query = dataset_prompt.replace(fact("rank1", "query_placeholder"), query)
    return fact("rank1", "prompt").format(query=query, passage=passage)  # values are not parsed again: braces stay


def cut_trace(text: str) -> str:
    """A trace cut as the authors do before forcing the answer: trailing space removed, then unless it ends a sentence
    (``.``, ``!``, ``?``) everything after its last sentence end (if it has one), then stripped.

    >>> cut_trace("  The passage is on topic. It mentions asp")
    'The passage is on topic.'
    >>> cut_trace("no sentence end at all "), cut_trace("Done!\\n\\n")
    ('no sentence end at all', 'Done!')
    """
    text = text.rstrip()
    if not text.endswith(ENDS):
        last = max(text.rfind(end) for end in ENDS)
        if last != -1:
            text = text[:last + 1]
    return text.strip()


def forced_prompt(prompt: str, trace: str) -> str:
    """The prompt that forces the answer after an unfinished trace: ``{prompt}\\n{cut trace}\\n</think>``.

    >>> forced_prompt("P<think>", "It is relevant. Becau")
    'P<think>\\nIt is relevant.\\n</think>'
    """
    return fact("rank1", "forced_prompt").format(prompt=prompt, trace=cut_trace(trace))


def rank1_score(top: dict[str, float] | None) -> float | None:
    """P(true) from the top logprobs of the answer position, or None when " true" or " false" is not among them.

    >>> import math
    >>> round(rank1_score({" true": math.log(0.3), " false": math.log(0.1), " maybe": -0.5}), 6)
    0.75
    >>> rank1_score({" true": -0.01}) is None, rank1_score(None) is None
    (True, True)
    """
    if not top:
        return None
    true, false = fact("rank1", "answer_tokens")
    return two_way(top, true, false)


@dataclass
class Rank1Counts:
    """How the pairs scored so far got their score: from the trace, from a forced answer, or the 0.5 fallback."""

    from_trace: int = 0
    forced: int = 0
    fallback: int = 0


class Rank1Scorer:
    """A ``PairScorer`` for Rank1 over ``requests`` (a ``CompletionRequests`` on the model's server).

    ``params``: the trace's sampling (the authors': temperature 0, 8192 tokens); ``logprobs``: top logprobs per
    position (20); ``answer_token_ids``: the ids of " true" and " false", sent as vLLM's ``allowed_token_ids`` in the
    forced answer (None: not sent, the forced answer reads the top logprobs unrestricted); ``dataset_prompt``: a
    prompt with ``FILL_QUERY_HERE`` (None for R2MED's datasets, as the authors' ``get_prompt``).
    """

    def __init__(self, requests: CompletionRequests, *, params: SamplingParams | None = None, logprobs: int = 20,
                 answer_token_ids: Sequence[int] | None = None, dataset_prompt: str | None = None) -> None:
        if answer_token_ids is not None and len(answer_token_ids) != 2:
            raise UsageError(f"answer_token_ids takes the ids of ' true' and ' false' (two ids), got {list(answer_token_ids)}")
        sampling = fact("rank1", "sampling")
        self.requests = requests
        self.params = params or SamplingParams(temperature=float(sampling["temperature"]), max_tokens=int(sampling["max_tokens"]))
        self.logprobs = logprobs
        self.answer_token_ids = list(answer_token_ids) if answer_token_ids is not None else None
        self.dataset_prompt = dataset_prompt
        self.extra = {"skip_special_tokens": bool(sampling["skip_special_tokens"])}
        self.counts = Rank1Counts()
        self._reported = Rank1Counts()  # the counts at the last finish()

    def forced_params(self) -> SamplingParams:
        forced = fact("rank1", "forced_sampling")
        return SamplingParams(temperature=float(forced["temperature"]), max_tokens=int(forced["max_tokens"]))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "rank1", "task": TASK, "model": self.requests.client.model, "prompt": fact("rank1", "prompt"),
            "dataset_prompt": self.dataset_prompt, "params": self.params.to_request(), "stop": fact("rank1", "stop"),
            "logprobs": self.logprobs, "answer_token_ids": self.answer_token_ids, "extra": self.extra,
            "forced": [fact("rank1", "forced_prompt"), self.forced_params().to_request()],
        }

    def trace_request(self, query: str, passage: str) -> TextRequest:
        return TextRequest(rank1_prompt(query, passage, self.dataset_prompt), self.params, tuple(fact("rank1", "stop")),
                           self.logprobs, self.extra)

    def forced_request(self, prompt: str, trace: str) -> TextRequest:
        extra = dict(self.extra)
        if self.answer_token_ids is not None:
            extra["allowed_token_ids"] = self.answer_token_ids
        return TextRequest(forced_prompt(prompt, trace), self.forced_params(), (), self.logprobs, extra)

    def sent(self) -> tuple[int, int, int]:
        return self.requests.sent()

    def pair_tokens(self, query: str, document: str) -> tuple[int, int] | None:
        """The tokens of the pair's trace and, when the trace did not hold the answer, its forced answer, as their
        responses recorded them (None when one is not at hand)."""
        trace_request = self.trace_request(query, document)
        trace = self.requests.lookup(trace_request)
        if trace is None or rank1_score(trace.get("last_top_logprobs")) is not None:
            return tokens_of([trace])
        forced = self.requests.lookup(self.forced_request(str(trace_request.prompt), trace.get("text") or ""))
        return tokens_of([trace, forced])

    def follow_up(self, request: TextRequest, record: Mapping[str, Any]) -> TextRequest | None:
        """The forced answer a trace's record calls for: None when its last position holds the answer."""
        if rank1_score(record.get("last_top_logprobs")) is not None:
            return None
        return self.forced_request(str(request.prompt), record.get("text") or "")

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> list[float]:
        # each forced answer goes right after its own trace, in the trace's slot: the server's slot still holds the
        # trace's prompt, which the forced prompt extends
        chains = self.requests.fetch_chains([self.trace_request(q, d) for q, d in zip(queries, documents)],
                                            self.follow_up)
        scores: list[float] = []
        for trace, forced in chains:
            value = rank1_score((trace if forced is None else forced).get("last_top_logprobs"))
            if forced is None:  # the trace held the answer (so value is not None)
                self.counts.from_trace += 1
            elif value is None:
                self.counts.fallback += 1
                value = float(fact("rank1", "fallback_score"))
            else:
                self.counts.forced += 1
            scores.append(float(value))  # type: ignore[arg-type]
        return scores

    def finish(self) -> None:
        """Once all pairs of a rerank are scored: a warning when some of those scored since the last call got the
        fallback 0.5 (one line a rerank, not one a batch)."""
        fallback = self.counts.fallback - self._reported.fallback
        scored = (self.counts.from_trace + self.counts.forced + self.counts.fallback
                  - self._reported.from_trace - self._reported.forced - self._reported.fallback)
        self._reported = replace(self.counts)
        if fallback:
            logger.warning("rank1: %d of %d pairs scored got the authors' fallback score 0.5 (no ' true'/' false' "
                           "among the forced answer's top %d logprobs)", fallback, scored, self.logprobs)
