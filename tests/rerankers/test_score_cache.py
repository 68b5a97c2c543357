"""The pointwise score cache: keyed by scorer content and pair text, append-only, survives a torn last line."""

from __future__ import annotations

import json

import pytest

from r2med.errors import InvalidInputError
from r2med.rerankers.pointwise import PointwiseReranker
from r2med.rerankers.score_cache import ScoreCache, pair_key, scorer_key
from r2med.types import Run


def test_round_trip_and_layout(tmp_path):
    material = {"model": "m", "max_length": 512}
    cache = ScoreCache.open(tmp_path, material)
    cache.put_many({pair_key("q", "a"): 1.25, pair_key("q", "b"): -3.0})
    cache.put_many([(pair_key("q", "c"), 0.5)])
    path = tmp_path / f"{scorer_key(material)}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"scorer": material}  # the header says what the key was made of
    assert lines[1:] == [{"k": pair_key("q", "a"), "s": 1.25}, {"k": pair_key("q", "b"), "s": -3.0},
                         {"k": pair_key("q", "c"), "s": 0.5}]
    again = ScoreCache.open(tmp_path, material)
    assert len(again) == 3 and again.get(pair_key("q", "b")) == -3.0 and again.get(pair_key("q", "zz")) is None
    assert (again.hits, again.misses) == (1, 1)
    assert len(ScoreCache.open(tmp_path, {**material, "max_length": 256})) == 0  # another scorer, another file


def test_torn_last_line_is_ignored_and_cut_off(tmp_path):
    cache = ScoreCache.open(tmp_path, {"model": "m"})
    cache.put_many({"k1": 1.0})
    with cache.path.open("a") as handle:
        handle.write('{"k": "k2", "s": 2.')  # a run killed mid-write
    reopened = ScoreCache.open(tmp_path, {"model": "m"})
    assert "k1" in reopened and "k2" not in reopened
    reopened.put_many({"k3": 3.0})
    assert [json.loads(line) for line in cache.path.read_text().splitlines()][1:] == [{"k": "k1", "s": 1.0}, {"k": "k3", "s": 3.0}]


def test_damage_in_the_middle_is_an_error_naming_the_line(tmp_path):
    cache = ScoreCache.open(tmp_path, {"model": "m"})
    cache.put_many({"k1": 1.0})
    text = cache.path.read_text()
    cache.path.write_text(text + "garbage\n" + '{"k": "k2", "s": 2.0}\n')
    with pytest.raises(InvalidInputError, match=r":3: not a score record"):
        ScoreCache.open(tmp_path, {"model": "m"})


class CountingScorer:
    """Score = length of the document text; counts the pairs it was asked for."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def describe(self) -> dict:
        return {"kind": "length"}

    def score(self, queries, documents):
        self.seen.extend(zip(queries, documents))
        return [float(len(d)) for d in documents]


def test_pointwise_rerun_is_free_and_duplicate_pairs_are_scored_once(tmp_path):
    corpus = {"a": "xx", "b": "xxxx", "c": "x", "d": "xxxxxxxx"}
    # q1 and q2 have the same text: their common pairs are scored once
    queries = {"q1": "same", "q2": "same", "q3": "other"}
    run = Run({"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"b": 3.0, "c": 2.0, "d": 1.0}, "q3": {"a": 1.0}})
    first = CountingScorer()
    reranker = PointwiseReranker("len", first, batch_size=2, cache_dir=tmp_path, progress=False)
    out = reranker.rerank(queries, corpus, run, top_k=2)
    # q1 top 2 = a (2 chars), b (4) -> b, a, then c; q2 top 2 = b (4), c (1) -> b, c, then d; q3: a
    assert [list(out[q]) for q in ("q1", "q2", "q3")] == [["b", "a", "c"], ["b", "c", "d"], ["a"]]
    # 5 pairs, 4 distinct, sent longest first by query + document characters: 4+4, 5+2, 4+2, 4+1
    assert first.seen == [("same", "xxxx"), ("other", "xx"), ("same", "xx"), ("same", "x")]
    assert (out.stats.pairs, out.stats.cached, out.stats.scored) == (5, 0, 4)
    second = CountingScorer()
    again = PointwiseReranker("len", second, batch_size=2, cache_dir=tmp_path, progress=False)
    rerun = again.rerank(queries, corpus, run, top_k=2)
    assert rerun == out
    assert second.seen == [] and (rerun.stats.cached, rerun.stats.scored) == (4, 0)


class FailingScorer(CountingScorer):
    """Scores the first batch, then fails (an out-of-memory error, a NaN...)."""

    def score(self, queries, documents):
        if self.seen:
            return [float("nan")] * len(queries)
        return super().score(queries, documents)


def test_scores_made_before_a_failure_are_kept(tmp_path):
    from r2med.errors import ProviderError

    corpus = {"a": "xx", "b": "xxxx", "c": "x"}
    run = Run({"q": {"a": 3.0, "b": 2.0, "c": 1.0}})
    failing = PointwiseReranker("len", FailingScorer(), batch_size=2, cache_dir=tmp_path, progress=False)
    with pytest.raises(ProviderError, match="as NaN"):
        failing.rerank({"q": "q"}, corpus, run)
    # the first batch (the two longest pairs: b, a) was stored; the rerun scores only c
    resumed = CountingScorer()
    out = PointwiseReranker("len", resumed, batch_size=2, cache_dir=tmp_path, progress=False).rerank({"q": "q"}, corpus, run)
    assert resumed.seen == [("q", "x")] and list(out["q"]) == ["b", "a", "c"]
