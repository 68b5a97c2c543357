"""The local pointwise rerankers on several devices (issue 36, item 7): ``--device cuda`` is every visible GPU,
``cuda:0,cuda:2`` picks, one worker process per device (``r2med.rerankers.devices``, over ``r2med.devices``, the
dense encoders' machinery). Without CUDA, ``cpu,cpu`` stands in: the scores are one device's, the score cache's key
is one device's (a rerun on one device scores nothing), and a worker that dies or fails stops the call with exit 6.

The tests that start worker processes are marked slow: each start imports torch and sentence-transformers in two
spawned processes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")

import scorer_helpers
from test_rerank_token_batches import DOCUMENTS, QUERIES, make_tiny_cross_encoder

from r2med.devices import WorkerDiedError, WorkerFailedError
from r2med.rerankers.cross_encoder import CrossEncoderScorer
from r2med.rerankers.devices import MultiDeviceScorer, scorer_on_devices
from r2med.rerankers.pointwise import PointwiseReranker
from r2med.rerankers.registry import make_reranker, options_for
from r2med.types import Run


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    return make_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"))


def _gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_a_device_list_gives_a_worker_per_device_and_one_devices_cache_key(tiny_cross_encoder):
    pair = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cpu,cpu", batch_tokens=150)
    one = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cpu", batch_tokens=150)
    assert isinstance(pair, MultiDeviceScorer) and pair.devices == ["cpu", "cpu"] and pair.pids == []  # lazy
    assert type(one) is CrossEncoderScorer and one.device == "cpu"
    assert pair.describe() == one.describe()  # the score cache is shared: nothing scored again
    assert pair.token_budget.tokens == one.token_budget.tokens == 150


def test_the_registry_spreads_a_local_reranker_over_the_devices_named(tiny_cross_encoder):
    reranker = make_reranker(str(tiny_cross_encoder), options_for(str(tiny_cross_encoder), {"device": "cpu,cpu"}))
    assert isinstance(reranker.scorer, MultiDeviceScorer) and reranker.scorer.devices == ["cpu", "cpu"]
    alone = make_reranker(str(tiny_cross_encoder), options_for(str(tiny_cross_encoder), {"device": "cpu"}))
    assert type(alone.scorer) is CrossEncoderScorer


def test_cuda_is_every_visible_gpu(monkeypatch, tiny_cross_encoder):
    _gpus(monkeypatch, 3)
    every = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cuda")
    assert isinstance(every, MultiDeviceScorer) and every.devices == ["cuda:0", "cuda:1", "cuda:2"]
    picked = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cuda:2,cuda:0")
    assert picked.devices == ["cuda:2", "cuda:0"]
    _gpus(monkeypatch, 1)
    assert type(scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cuda")) is CrossEncoderScorer


@pytest.fixture(scope="module")
def pair(tiny_cross_encoder):
    scorer = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cpu,cpu", batch_tokens=150)
    yield scorer
    scorer.close()


@pytest.mark.slow
def test_two_workers_give_the_scores_of_one_device(pair, tiny_cross_encoder, capfd):
    reference = np.array(CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=150)
                         .score(QUERIES, DOCUMENTS))
    capfd.readouterr()
    got = np.array(pair.score(QUERIES, DOCUMENTS))
    assert "Loading weights" not in capfd.readouterr().err  # the workers load their models without a bar of theirs
    # other pairs share a batch than on one device: float noise only (as token budgets, test_rerank_token_batches.py)
    assert (np.abs(got - reference) <= 1e-6 * np.maximum(1.0, np.abs(reference))).all()
    assert pair.scored == [15, 15] and len(set(pair.pids)) == 2
    # one pair per batch: the same batches on one device and on two, so the same bits (with each worker's threads)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // 2))
    try:
        alone = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=150)
        alone.token_budget.texts = 1
        expected = alone.score(QUERIES, DOCUMENTS)
    finally:
        torch.set_num_threads(threads)
    pair.token_budget.texts = 1
    try:
        assert pair.score(QUERIES, DOCUMENTS) == expected
    finally:
        pair.token_budget.texts = None
    assert pair.score([], []) == []


@pytest.mark.slow
def test_a_rerank_on_two_workers_fills_the_score_cache_one_device_reads(pair, tiny_cross_encoder, tmp_path):
    run = Run({"q": {f"d{i}": float(-i) for i in range(30)}, "r": {f"d{i}": float(i) for i in range(30)}})
    queries, corpus = {"q": "fever pain", "r": "gene drug dose"}, {f"d{i}": DOCUMENTS[i] for i in range(30)}
    cache = tmp_path / "scores"
    two = PointwiseReranker("ce", pair, batch_size=4, cache_dir=cache, progress=False)
    reranked = two.rerank(queries, corpus, run, top_k=30)
    assert reranked.stats.scored == 60
    one = CrossEncoderScorer(str(tiny_cross_encoder), device="cpu", batch_tokens=150)
    direct = {q: one.score([queries[q]] * 30, DOCUMENTS) for q in queries}
    for q in queries:
        assert list(reranked[q]) == [f"d{i}" for i in sorted(range(30), key=lambda i: (-direct[q][i], i))]
    again = PointwiseReranker("ce", one, batch_size=4, cache_dir=cache, progress=False).rerank(queries, corpus, run,
                                                                                               top_k=30)
    assert (again.stats.cached, again.stats.scored) == (60, 0)  # one device reads what two scored
    assert again == reranked


@pytest.mark.slow
def test_a_worker_that_dies_stops_the_call_with_exit_6(tiny_cross_encoder):
    dying = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cpu,cpu",
                              setup=scorer_helpers.dying)
    with pytest.raises(WorkerDiedError) as caught:
        dying.score(QUERIES, DOCUMENTS)
    message = str(caught.value)
    assert caught.value.exit_code == 6
    assert "the scoring worker on cpu (device " in message and "was killed by signal 9 (SIGKILL)" in message
    assert "with its pairs not all scored; the pairs scored before this group are kept in the score cache" in message
    assert dying.pids == []  # the other worker was stopped too


@pytest.mark.slow
def test_an_error_in_a_worker_stops_the_call_with_that_error(tiny_cross_encoder, caplog):
    failing = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cpu,cpu",
                                setup=scorer_helpers.failing)
    with pytest.raises(WorkerFailedError) as caught:
        failing.score(QUERIES, DOCUMENTS)
    assert caught.value.exit_code == 6
    assert "the scoring worker on cpu (device " in str(caught.value)
    assert "failed: ValueError: boom in a share of 15 pairs" in str(caught.value)
    assert "Traceback" in caplog.text and "scorer_helpers.py" in caplog.text  # the worker's traceback, in the log
    assert failing.pids == []


@pytest.mark.gpu
def test_every_visible_gpu_gives_the_scores_of_one(tiny_cross_encoder):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices or more")
    every = scorer_on_devices(CrossEncoderScorer, str(tiny_cross_encoder), device="cuda", batch_tokens=150)
    try:
        got = np.array(every.score(QUERIES, DOCUMENTS))
        assert min(every.scored) > 0
    finally:
        every.close()
    one = np.array(CrossEncoderScorer(str(tiny_cross_encoder), device="cuda:0", batch_tokens=150)
                   .score(QUERIES, DOCUMENTS))
    assert np.abs(got - one).max() <= 1e-5
