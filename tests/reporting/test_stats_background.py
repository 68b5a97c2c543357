"""The report's paired tests in a forked worker while it reads and draws (r2med.reporting.stats.PendingTests): the
same numbers and the same page as computed in one process; a worker that dies is replaced by computing here; an
error or Ctrl-C in the caller leaves no worker behind."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from reporting_helpers import run

from r2med.reporting import stats
from r2med.reporting.compare import SystemSource, compare_systems, start_comparison

pytest.importorskip("scipy")
fork_only = pytest.mark.skipif(not stats.fork_is_safe() or stats.usable_cores() < 2,
                               reason="needs fork and 2 cores")

rng = np.random.default_rng(3)
PAIRS = [(list(rng.random(40)), list(rng.random(40))) for _ in range(3)]


@pytest.fixture
def worker_always(monkeypatch):
    monkeypatch.setattr(stats, "BACKGROUND_MIN_VALUES", 0)


@fork_only
def test_the_worker_gives_the_numbers_of_one_process(worker_always):
    with stats.PendingTests(PAIRS, meanwhile=True, n_resamples=2000, seed=5) as pending:
        assert pending.in_worker
        got = pending.result()
        assert pending.in_worker and pending.result() is got  # computed once
    assert got == stats.paired_tests(PAIRS, n_resamples=2000, seed=5)
    assert [t.n for t in got] == [40, 40, 40] and got[0].n_resamples == 2000


def test_small_work_or_no_other_work_stays_here():
    assert not stats.PendingTests(PAIRS, meanwhile=False, n_resamples=100).in_worker  # 'r2med compare'
    assert len(PAIRS) * 40 < stats.BACKGROUND_MIN_VALUES
    assert not stats.PendingTests(PAIRS, meanwhile=True, n_resamples=100).in_worker


def dying(pairs, options):  # the worker's job, replaced: the worker is killed as by the kernel's OOM killer
    os.kill(os.getpid(), signal.SIGKILL)


def sleeping(pairs, options):
    time.sleep(60)


@fork_only
def test_a_worker_that_dies_is_replaced_by_computing_here(worker_always, monkeypatch, caplog):
    monkeypatch.setattr(stats, "_in_worker", dying)
    with stats.PendingTests(PAIRS, meanwhile=True, n_resamples=500, seed=1) as pending:
        assert pending.in_worker
        got = pending.result()
    assert got == stats.paired_tests(PAIRS, n_resamples=500, seed=1)
    assert "the worker computing the paired tests died; computing them here" in caplog.text


@fork_only
def test_an_error_in_the_caller_leaves_no_worker(worker_always, monkeypatch):
    monkeypatch.setattr(stats, "_in_worker", sleeping)
    with pytest.raises(KeyboardInterrupt):
        with stats.PendingTests(PAIRS, meanwhile=True, n_resamples=500) as pending:
            time.sleep(0.5)  # the worker has started
            processes = list(pending._pool._processes.values())
            assert processes and all(p.is_alive() for p in processes)
            raise KeyboardInterrupt
    for process in processes:
        process.join(5)
    assert not any(p.is_alive() for p in processes)


@fork_only
def test_the_report_is_the_same_with_its_tests_in_a_worker(monkeypatch, tmp_path):
    """The R2MED-sized report gives its tests to a worker (benchmarks/report_scale.py); the page must be the page the
    tests computed here give, to the byte."""
    from test_compare import _write  # noqa: PLC0415  (one result in r2med's layout)

    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(8)
    for dataset, n in (("Biology", 103), ("MedQA-Diag", 118)):
        b = rng.uniform(0, 0.6, n)
        _write(tmp_path / "results", "sys_a", dataset, {f"q{i}": v for i, v in enumerate(np.clip(b + rng.normal(0.05, 0.1, n), 0, 1))})
        _write(tmp_path / "results", "sys_b", dataset, {f"q{i}": v for i, v in enumerate(b)})
    forked = []
    real = stats.forked_pool
    monkeypatch.setattr(stats, "forked_pool", lambda n: forked.append(n) or real(n))
    pages = {}
    for name, threshold in (("here", 10**9), ("worker", 0)):
        monkeypatch.setattr(stats, "BACKGROUND_MIN_VALUES", threshold)
        page = tmp_path / name / "report.html"
        result = run("report", tmp_path / "results", "-o", page, "--n-resamples", 3000)
        assert result.code == 0, result.err
        pages[name] = page.read_bytes()
    assert forked == [1]  # the second report only
    assert pages["worker"] == pages["here"] and b"perm p" in pages["here"]


def test_compare_systems_is_start_comparison_finished(tmp_path):
    from test_compare import _write  # noqa: PLC0415

    _write(tmp_path, "a", "Biology", {"q1": 0.5, "q2": 0.25, "q3": 1.0})
    _write(tmp_path, "b", "Biology", {"q1": 0.25, "q2": 0.25, "q3": 0.5})
    a, b = (SystemSource(x, x, directory=tmp_path / "base retriever" / x) for x in "ab")
    with start_comparison(a, b, n_resamples=100, meanwhile=True) as pending:
        started = pending.result()
    assert started == compare_systems(a, b, n_resamples=100)
    row = started.datasets[0]
    assert (row.dataset, row.test.wins, row.test.ties, row.test.losses) == ("Biology", 2, 1, 0)
    assert row.test.mean_diff == pytest.approx(0.25) and started.pooled == row.test  # one dataset: pooled = it
