"""Atomic writes: write a temporary file beside the target, then ``os.replace`` it into place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, writer: Callable[[IO[Any]], None], *, binary: bool = False) -> Path:
    """Create ``path`` (and its parents) through ``writer(handle)``; readers never see a partial file.

    The handle is text (UTF-8, ``\\n`` line ends) unless ``binary``; the data is flushed to disk
    before the temporary file is renamed over ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        mode = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, **mode) as handle:
            writer(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return write_atomic(path, lambda handle: handle.write(text))
