"""The reranked-run contract: head reordered, tail untouched, rank scores; never a document dropped or repeated."""

from __future__ import annotations

import itertools
import random

import pytest

from r2med.errors import InvalidInputError, UsageError
from r2med.llm.client import ChatResult, Usage
from r2med.rerankers.base import assemble, check_texts, check_top_k, order_by_scores, ranked_scores, split_head
from r2med.rerankers.listwise import ListwiseReranker
from r2med.rerankers.pointwise import PointwiseReranker
from r2med.types import Run


def test_assemble_worked_example():
    # first stage: a 5, b 4, c 3, d 2, e 1; top 3 = a b c reranked to c a b; d e stay below in their order.
    # 5 documents -> scores 5, 4, 3, 2, 1 by new position.
    run = Run({"q": {"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}, "empty": {}})
    out = assemble(run, {"q": ["c", "a", "b"]}, 3, name="ce")
    assert out["q"] == {"c": 5.0, "a": 4.0, "b": 3.0, "d": 2.0, "e": 1.0}
    assert [d for d, _ in out.ranked("q")] == ["c", "a", "b", "d", "e"]
    assert out["empty"] == {} and out.name == "ce"
    assert run["q"]["a"] == 5.0  # input untouched


def test_assemble_uses_ranked_order_not_insertion_order():
    # stored order x y z, but by score z (3) > x (2) > y (1): the head of 2 is z, x
    run = Run({"q": {"x": 2.0, "y": 1.0, "z": 3.0}})
    assert split_head(run, "q", 2) == (["z", "x"], ["y"])
    assert list(assemble(run, {"q": ["x", "z"]}, 2, name="r")["q"]) == ["x", "z", "y"]


def test_assemble_refuses_a_head_that_is_not_a_permutation():
    run = Run({"q": {"a": 2.0, "b": 1.0}})
    with pytest.raises(ValueError, match="not a permutation"):
        assemble(run, {"q": ["a", "a"]}, 2, name="r")
    with pytest.raises(ValueError, match="not a permutation"):
        assemble(run, {"q": ["a"]}, 2, name="r")


def test_helpers():
    assert ranked_scores(["x", "y"]) == {"x": 2.0, "y": 1.0}
    # ties (a, c at 0.1) keep input order; d 0.9 > b 0.7
    assert order_by_scores(["a", "b", "c", "d"], [0.1, 0.7, 0.1, 0.9]) == ["d", "b", "a", "c"]
    assert check_top_k(100) == 100
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(UsageError, match="positive integer"):
            check_top_k(bad)


def test_check_texts_names_every_problem():
    run = Run({"q1": {"d1": 2.0, "zz": 1.0}, "q9": {"d1": 1.0}}, name="bm25")
    with pytest.raises(InvalidInputError) as info:
        check_texts({"q1": "text"}, {"d1": "doc"}, run, 10)
    assert info.value.problems == [
        "document 'zz' (query 'q1') is not in the corpus",
        "query 'q9' of the run is not among the dataset's queries",
    ]
    check_texts({"q1": "text"}, {"d1": "doc"}, Run({"q1": {"d1": 2.0, "zz": 1.0}}), 1)  # zz is below the top 1


# ---------------------------------------------------------------- property: never drop or repeat a document
class RandomScorer:
    """Scores drawn from a few values, so ties are common."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def describe(self) -> dict:
        return {"kind": "random"}

    def score(self, queries, documents):
        return [float(self.rng.choice([0, 1, 2, 3])) for _ in queries]


class GarbageClient:
    """A stand-in for ChatClient: answers every window at once with random garbage, valid or not."""

    model = "garbage"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.usage = Usage()

    def complete_many(self, jobs, *, concurrency, on_result, progress):
        for job in jobs:
            ids = [self.rng.randint(-2, 25) for _ in range(self.rng.randint(0, 25))]
            text = self.rng.choice([" > ".join(f"[{i}]" for i in ids), ", ".join(map(str, ids)), "no", "<think>[1]"])
            on_result(job, ChatResult(text, None, "stop", 1, 1, 1, 0.0))
        return self.usage


def _random_run(rng: random.Random) -> tuple[Run, dict, dict]:
    run = Run(name="first")
    corpus = {f"d{i}": f"document {i} " + "x" * rng.randint(0, 5) for i in range(60)}
    queries = {}
    for q in range(rng.randint(1, 4)):
        qid = f"q{q}"
        queries[qid] = f"query {q}"
        docs = rng.sample(sorted(corpus), rng.randint(0, 45))
        run[qid] = {d: float(rng.choice([1, 2, 3, 4.5])) for d in docs}  # ties in the first stage too
    return run, queries, corpus


def _check_contract(before: Run, after: Run, top_k: int) -> None:
    assert set(after) == set(before)
    for qid in before:
        old = [d for d, _ in before.ranked(qid)]
        new = [d for d, _ in after.ranked(qid)]
        assert sorted(new) == sorted(old) and len(new) == len(set(new))  # nothing dropped, nothing repeated
        assert set(new[:top_k]) == set(old[:top_k])  # the top k stays the top k
        assert new[top_k:] == old[top_k:]  # the rest keeps its order
        scores = [after[qid][d] for d in new]
        assert all(a > b for a, b in itertools.pairwise(scores))  # strictly decreasing: trec_eval sees this order
        assert sorted(after[qid], key=lambda d: (-after[qid][d], d)) == new


def test_pointwise_never_drops_or_repeats(tmp_path):
    rng = random.Random(11)
    for trial in range(150):
        run, queries, corpus = _random_run(rng)
        top_k = rng.choice([1, 3, 10, 20, 100])
        reranker = PointwiseReranker("p", RandomScorer(rng), batch_size=rng.randint(1, 9), progress=False,
                                     cache_dir=tmp_path / str(trial % 3))  # some trials meet cached scores
        _check_contract(run, reranker.rerank(queries, corpus, run, top_k=top_k), top_k)


def test_listwise_never_drops_or_repeats():
    rng = random.Random(12)
    for _ in range(150):
        run, queries, corpus = _random_run(rng)
        top_k = rng.choice([1, 5, 10, 20, 100])
        window = rng.randint(1, 12)
        reranker = ListwiseReranker(GarbageClient(rng), window=window, stride=rng.randint(1, window),
                                    direction=rng.choice(["back_to_front", "front_to_back"]), progress=False)
        _check_contract(run, reranker.rerank(queries, corpus, run, top_k=top_k), top_k)
