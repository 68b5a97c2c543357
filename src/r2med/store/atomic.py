"""Atomic writes: write a temporary file beside the target, then ``os.replace`` it into place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(path: Path, writer: Callable[[IO[str]], None]) -> Path:
    """Create ``path`` (and its parents) through ``writer(handle)``; readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            writer(handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return write_atomic(path, lambda handle: handle.write(text))
