"""Shared fixtures: paths to test data, an isolated R2MED_HOME, offline hub, and a CLI runner."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED = REPO.parent / "shared"

#: tests/plan_spy/sitecustomize.py is put first on a dry-run subprocess's PYTHONPATH and blocks its sockets and
#: dataset files; ``--doctest-modules`` must never import it into the test process itself.
collect_ignore = ["plan_spy"]


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skips the test when the shared folder is not beside the checkout."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets an empty R2MED_HOME and an offline hub.

    A test that unsets HF_HUB_OFFLINE fakes the hub's functions; r2med's probe of the hub (one TCP connection
    before the first request, ``r2med.hf.connect_once``) then finds it there, without a connection: tests never
    use the network. ``tests/cli/test_offline.py`` puts the real probe back, behind a blocked socket layer."""
    import r2med.hf

    home = tmp_path_factory.mktemp("r2med_home")
    monkeypatch.setenv("R2MED_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(r2med.hf, "connect_once", lambda host, port, timeout: None)
    monkeypatch.setattr(r2med.hf, "_probes", {})
    return home


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli():
    """Run ``r2med`` in-process: ``cli("evaluate", "--qrels", ...)`` -> CliResult."""
    from r2med.cli import main

    def run(*args: object) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse usage errors
                code = int(exc.code or 0)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def kill_at_write(monkeypatch):
    """``kill_at_write(n)`` makes the n-th atomic write raise KeyboardInterrupt just before its rename (a kill
    between two writes) and returns the list of paths written; ``kill_at_write.disarm()`` writes normally again."""
    from r2med.io import atomic

    commit = atomic._commit

    def arm(n: int) -> list:
        steps = []

        def killing(tmp, path):
            steps.append(path)
            if len(steps) == n:
                raise KeyboardInterrupt("killed")
            commit(tmp, path)

        monkeypatch.setattr(atomic, "_commit", killing)
        return steps

    arm.disarm = lambda: monkeypatch.setattr(atomic, "_commit", commit)
    return arm
