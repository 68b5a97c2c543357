"""Whether a directory can be written before any work is done: ``--output`` (an error) and the cache (a warning).

A path that is a file, lies under a file, or sits in a directory where nothing can be created would fail
at the first write, after minutes of work and with a traceback. :func:`dir_problem` says why, without
creating the directory: it walks up to the nearest existing ancestor and tries to create (and at once
removes) a temporary file there.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from r2med.errors import R2MedError, UsageError

logger = logging.getLogger(__name__)


def dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be (or become) a directory r2med writes in; ``None`` when it can.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> dir_problem(root / "new" / "deeper") is None
    True
    >>> (root / "f").write_text("x")
    1
    >>> dir_problem(root / "f") == f"{root / 'f'} is a file, not a directory"
    True
    >>> dir_problem(root / "f" / "sub") == f"{root / 'f'} is a file, so no directory can be made under it"
    True
    """
    path = Path(path)
    existing = path
    while not (existing.exists() or existing.is_symlink()) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        kind = "a file" if existing.is_file() else "not a directory"
        if existing == path:
            return f"{existing} is {kind}, not a directory" if kind == "a file" else f"{existing} is {kind}"
        return f"{existing} is {kind}, so no directory can be made under it"
    try:
        fd, probe = tempfile.mkstemp(prefix=".r2med-write-check-", dir=existing)
    except OSError as exc:
        return f"cannot create files in {existing} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_dir(path: Path, *, what: str = "--output", error: type[R2MedError] = UsageError) -> Path:
    """``path`` if results can be written there; else ``error`` naming ``what``, the path, why and the fix."""
    problem = dir_problem(path)
    if problem is not None:
        raise error(f"{what} {path}: {problem}; pass a directory (it is created if missing)")
    return Path(path)


def usable_cache_dir(path: Path | None, *, what: str = "R2MED_HOME") -> Path | None:
    """``path`` if the caches can be written there; else ``None`` (no cache) with a warning saying why."""
    if path is None:
        return None
    problem = dir_problem(path)
    if problem is None:
        return Path(path)
    logger.warning("%s %s: %s; running without the cache (indexes, embeddings, reranker scores and LLM responses are "
                   "neither reused nor saved); set %s to a writable directory, or pass --no-cache to silence this",
                   what, path, problem, what)
    return None
