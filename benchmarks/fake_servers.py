"""The tests' fake LLM servers, each started in its own process (so that it does not share the benchmark's GIL)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


@contextlib.contextmanager
def server_process(folder: str, module: str, cls: str, latency: float, *, start: bool = False) -> Iterator[str]:
    """``tests/<folder>/<module>.<cls>(latency=...)`` (``.start()``-ed when ``start``) in a child process; yields its
    base URL and stops it on exit."""
    started = ".start()" if start else ""
    code = (f"import sys; from {module} import {cls}; s = {cls}(latency={latency!r}){started}; "
            "print(s.base_url, flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=TESTS / folder, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
