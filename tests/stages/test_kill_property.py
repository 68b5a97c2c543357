"""Killed anywhere, rerun, identical: random kill points during a run, then a rerun without faults, always end with
the files of an uninterrupted run (results and caches), never with a set that mixes two runs.

The kills are injected at every point where r2med changes a file (``r2med.io.atomic``: the rename of a finished
temporary file, the removal of a file), sometimes leaving the temporary file a SIGKILL would leave, cut at a random
byte; and, a few times, a real ``python -m r2med.cli run`` is SIGKILLed at a random moment.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import DATA, REPO
from r2med.datasets import load_dir
from r2med.io import atomic
from r2med.io.digest import digest_file
from r2med.rerankers.base import Reranked
from r2med.retrievers.bm25.retriever import BM25Retriever
from r2med.stages import FirstStage, Rerank, Retrieve, run_stage
from r2med.types import Run

DEAD_PID = 4_194_305  # above Linux's largest pid: no process has it


class Killed(BaseException):
    """What the injected kill raises (a BaseException, as KeyboardInterrupt: no handler swallows it)."""


class Reverse:
    """A fake reranker: the first stage's top k in reverse order, with a window log (an artifact)."""

    name = "reverse"

    def describe(self) -> dict[str, Any]:
        return {"kind": "reverse"}

    def rerank(self, queries, corpus, run: Run, *, top_k: int = 100) -> Run:
        out, log = Run(), []
        for qid in run:
            ranked = [doc for doc, _ in run.ranked(qid)][:top_k][::-1]
            out[qid] = {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}
            log.append({"qid": qid, "order": ranked})
        return Reranked(out, name=self.name, artifacts={"windows": log})


def work(out: Path, home: Path, top_k: int) -> None:
    """The run under test: BM25 (its index cached under ``home``) then a reranker reading BM25's stored run."""
    tiny = load_dir(DATA / "tiny", "tiny")
    bm25 = BM25Retriever(cache_dir=home / "indexes" / "bm25", progress=False, workers=1)
    run_stage(Retrieve(bm25, top_k=top_k), [tiny], output=out)
    run_stage(Rerank(Reverse(), FirstStage.resolve("bm25", output=out), top_k=2), [tiny], output=out)


def snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file under ``roots``; manifests checked against their files, then without timings, dates, environment
    and the digest of the result JSON (whose "evaluation_time" is a timing); result JSONs without that timing."""
    files: dict[str, bytes] = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            if path.name.endswith(".manifest.json"):
                manifest = json.loads(data)
                for name, entry in manifest["files"].items():
                    digest = digest_file(path.parent / name)
                    assert entry == {"sha256": digest.sha256, "size": digest.size}, path
                for key in ("timings_s", "created", "environment"):
                    manifest.pop(key)
                manifest["files"].pop(path.name[: -len(".manifest.json")] + ".json")
                data = json.dumps(manifest, sort_keys=True).encode()
            elif path.suffix == ".json" and "evaluation_time" in (record := json.loads(data)):
                record.pop("evaluation_time")
                data = json.dumps(record, sort_keys=True).encode()
            files[f"{root.name}/{path.relative_to(root)}"] = data
    return files


def _steady(monkeypatch) -> None:
    """The runner's clock stands still, so that "evaluation_time" is the same in every run; the manifests'
    environment (left out of the comparison) is not looked up 600 times, and nothing waits for the disk (a kill
    here is a raised exception, not a power cut: the data is in the page cache either way)."""
    monkeypatch.setattr("r2med.stages.runner.time", SimpleNamespace(perf_counter=lambda: 0.0))
    monkeypatch.setattr("r2med.manifest.environment", lambda: {"r2med": "test"})
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def steady_clock(monkeypatch):
    _steady(monkeypatch)


class Faults:
    """Counts the points where files change; at the ``kill_at``-th, kills (maybe leaving a cut temporary file)."""

    def __init__(self, monkeypatch, rng: random.Random | None = None, kill_at: int | None = None) -> None:
        self.rng, self.kill_at, self.steps = rng, kill_at, 0
        commit, unlink = atomic._commit, atomic._unlink

        def _commit(tmp: str, path: Path) -> None:
            self._step(Path(tmp), Path(path))
            commit(tmp, path)

        def _unlink(path: Path) -> None:
            self._step(None, Path(path))
            unlink(path)

        monkeypatch.setattr(atomic, "_commit", _commit)
        monkeypatch.setattr(atomic, "_unlink", _unlink)

    def _step(self, tmp: Path | None, path: Path) -> None:
        self.steps += 1
        if self.steps != self.kill_at:
            return
        assert self.rng is not None
        if tmp is not None and self.rng.random() < 0.5:  # what a SIGKILL in mid-write leaves behind
            data = tmp.read_bytes()
            left = path.parent / f".{path.name}.{DEAD_PID}-{self.rng.randrange(10**8):08d}.tmp"
            left.write_bytes(data[: self.rng.randint(0, len(data))])
        raise Killed(f"killed at step {self.steps} ({path.name})")


def test_two_hundred_random_kills_then_a_rerun_end_identical(tmp_path, monkeypatch, steady_clock):
    """From nothing or over a stored top-k 1 result, a top-k 3 run is killed at a random point; then either
    configuration is run again, and must end exactly as an uninterrupted run of it (the issue's case: files of
    the killed run beside the old manifest must not pass for the old configuration's)."""
    reference = {k: snapshot(*_fresh(tmp_path / f"ref-{k}", k)) for k in (1, 3)}
    steps = {}
    for start in ("empty", "other"):  # from nothing, or over a stored result of another configuration
        root = tmp_path / f"count-{start}"
        if start == "other":
            work(root / "out", root / "home", top_k=1)
        faults = Faults(monkeypatch)
        work(root / "out", root / "home", top_k=3)
        steps[start] = faults.steps
        monkeypatch.undo()
        _steady(monkeypatch)
        assert snapshot(root / "out", root / "home") == reference[3]
    assert steps["empty"] >= 10 and steps["other"] >= 8

    rng = random.Random(20240611)
    kills: dict[str, set[int]] = {"empty": set(), "other": set()}
    for trial in range(200):
        start = rng.choice(("empty", "other"))
        root = tmp_path / f"t{trial}"
        if start == "other":
            work(root / "out", root / "home", top_k=1)
        kill_at = rng.randint(1, steps[start])
        Faults(monkeypatch, rng, kill_at)
        with pytest.raises(Killed):
            work(root / "out", root / "home", top_k=3)
        monkeypatch.undo()
        _steady(monkeypatch)
        again = rng.choice((1, 3))
        work(root / "out", root / "home", top_k=again)  # the rerun, without faults
        assert snapshot(root / "out", root / "home") == reference[again], \
            f"trial {trial}: from {start}, top-k 3 killed at step {kill_at}, rerun with top-k {again}"
        kills[start].add(kill_at)
    # every kill point was tried from both starting points
    assert kills == {start: set(range(1, steps[start] + 1)) for start in steps}


def _fresh(root: Path, top_k: int) -> tuple[Path, Path]:
    work(root / "out", root / "home", top_k=top_k)
    return root / "out", root / "home"


#: ``r2med run`` in a child process whose every file change is announced on stderr and takes 50 ms (40 of them with
#: the finished temporary file not yet renamed), so that kills at random moments land between and inside writes,
#: not only in the start-up
_CHILD = """
import sys, time
from r2med.io import atomic
commit = atomic._commit
def slow(tmp, path):
    print("step", flush=True, file=sys.stderr)
    time.sleep(0.04)
    commit(tmp, path)
    time.sleep(0.01)
atomic._commit = slow
from r2med.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli_run(out: Path, home: Path) -> subprocess.Popen:
    env = {**os.environ, "R2MED_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", _CHILD, "-q", "run", "--data-dir", str(DATA / "tiny"), "--output", str(out),
            "--top-k", "3"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigkill_at_random_moments_then_a_rerun_ends_identical(tmp_path):
    ref = tmp_path / "ref"
    proc = _cli_run(ref / "out", ref / "home")
    assert proc.stderr is not None and proc.stderr.readline() == "step\n"
    began = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    window = time.monotonic() - began  # from the first file change to the end
    reference = snapshot(ref / "out", ref / "home")
    rng = random.Random(7)
    for trial in range(4):
        root = tmp_path / f"k{trial}"
        proc = _cli_run(root / "out", root / "home")
        assert proc.stderr is not None and proc.stderr.readline() == "step\n"
        time.sleep(rng.uniform(0, window))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        rerun = _cli_run(root / "out", root / "home")
        _, err = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, err
        assert snapshot(root / "out", root / "home") == reference, f"trial {trial}"
