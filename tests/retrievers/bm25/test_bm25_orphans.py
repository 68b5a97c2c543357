"""The parallel BM25 analysis never leaves worker processes behind: not when its parent is killed (SIGKILL), not
when ``r2med`` is asked to stop (SIGTERM, handled like Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or "fork" not in __import__("multiprocessing")
                                .get_all_start_methods(), reason="needs Linux /proc and fork")

REPO = Path(__file__).resolve().parents[3]

#: a parent that analyses a corpus on two forked workers, each slice slowed to 0.5 s so that the work lasts (the
#: workers are NumPy's path: with BM25's C kernel the analysis runs in one process, so the kernel is hidden)
DRIVER = """
import sys, time
from r2med.retrievers.bm25 import kernel, parallel
kernel.native = None
parallel.MIN_PARALLEL_TEXTS = 1
parallel._SLICE = 5
parallel.default_workers = lambda: 2
_counts = parallel.slice_counts
def slow(*args):
    time.sleep(0.5)
    return _counts(*args)
parallel.slice_counts = slow
if sys.argv[1] == "pool":
    from r2med.retrievers.bm25.analyzer import EnglishAnalyzer
    parallel.analyze_and_count([f"document {i} about fever" for i in range(400)], EnglishAnalyzer())
    print("finished")
else:
    from r2med.cli import main
    sys.exit(main(sys.argv[2:]))
"""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == parent:
                found.append(int(entry.name))
    return found


def _alive(pids: list[int]) -> list[int]:
    """The processes still running (a zombie waiting for a reaper has exited)."""
    return [pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] not in ("Z", "X")]


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, list[int]]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = _children(proc.pid)
        if len(workers) == 2:
            break
        time.sleep(0.05)
    if len(workers) != 2:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"the two workers never started: {workers}; {out} {err}")
    time.sleep(1.0)  # the workers are inside their slices
    assert _alive(workers) == workers
    return proc, workers


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(pids)
    for pid in left:  # do not leave them behind for the rest of the session
        os.kill(pid, signal.SIGKILL)
    return left


def _finish(proc: subprocess.Popen, workers: list[int]) -> tuple[list[int], str]:
    """Wait for the parent, then for its workers (up to 10 s); returns the workers left (killed now) and stderr.

    The output is read only after the workers are gone: a worker left behind holds the pipes open."""
    proc.wait(timeout=15)
    left = _wait_gone(workers)
    return left, proc.communicate(timeout=10)[1]


def test_workers_exit_when_their_parent_is_killed(tmp_path):
    proc, workers = _start(tmp_path, "pool")
    proc.send_signal(signal.SIGKILL)
    left, _ = _finish(proc, workers)
    assert proc.returncode == -signal.SIGKILL
    assert left == []


def test_sigterm_stops_r2med_like_ctrl_c_and_takes_its_workers_along(tmp_path):
    data = tmp_path / "ds"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"fever case {i}"}) + "\n"
                                               for i in range(400)))
    (data / "query.jsonl").write_text('{"id": "q1", "text": "fever"}\n')
    (data / "qrels.jsonl").write_text('{"q_id": "q1", "p_id": "d1", "score": 1}\n')
    out = tmp_path / "out"
    proc, workers = _start(tmp_path, "cli", "-q", "run", "--data-dir", str(data), "--output", str(out), "--no-cache")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    left, err = _finish(proc, workers)
    assert time.monotonic() - started < 10  # not after the rest of the 40 slices (10 s)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "r2med: interrupted"
    assert left == []
    assert not (out / "base retriever" / "bm25" / "ds.json").exists()


def test_the_cli_restores_the_previous_sigterm_handler(cli):
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert cli("datasets", "list", "--json").code == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_during_a_command_is_an_interruption(cli, monkeypatch):
    import r2med.cli.datasets as module

    def stopped(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        return 0

    monkeypatch.setattr(module, "cmd_datasets_list", stopped)
    before = signal.getsignal(signal.SIGTERM)
    result = cli("datasets", "list")
    assert (result.code, result.err) == (130, "r2med: interrupted\n")
    assert signal.getsignal(signal.SIGTERM) is before
