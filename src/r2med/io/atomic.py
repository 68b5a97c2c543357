"""Atomic writes: write a temporary file beside the target, then ``os.replace`` it into place.

The temporary file is ``.<name>.<pid>-<random>.tmp``. A process killed in mid-write leaves it behind; the next
write into the same directory removes the ones whose process is gone (``clean_temp_files``), so killed runs do
not pile up half files. Every change of a stored file goes through ``_commit`` (a rename into place) or
``_unlink`` (a removal): the two points where a kill can fall between two files, and where tests inject one.

An ``OSError`` that names no file (``No space left on device`` from a write, a flush or ``fsync``) is raised again
naming the file being written (:func:`naming`), so that the user learns which disk filled up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from r2med.io.digest import Digest, digest_file

#: ``.<name>.<pid>-<random>.tmp`` (this writer) and ``.<name>.<random>.tmp`` (older r2med, no pid)
_TEMP = re.compile(r"^\..+\.(?:(\d+)-)?[a-z0-9_]{8}\.tmp$")
#: a temporary file without a pid is only removed when older than this (its writer cannot be asked)
_OLD_TEMP_S = 24 * 3600

_recorded: ContextVar[dict[Path, Digest] | None] = ContextVar("r2med_recorded_writes", default=None)


def write_atomic(path: Path, writer: Callable[[IO[Any]], None], *, binary: bool = False) -> Path:
    """Create ``path`` (and its parents) through ``writer(handle)``; readers never see a partial file.

    The handle is text (UTF-8, ``\\n`` line ends) unless ``binary``; the data is flushed to disk
    before the temporary file is renamed over ``path``. Inside ``recorded_writes()`` the digest of
    the bytes written (hashed before the rename) is recorded under ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_temp_files(path.parent)
    with naming(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        with naming(path):
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
            mode = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": "\n"}
            with os.fdopen(fd, **mode) as handle:
                writer(handle)
                handle.flush()
                os.fsync(handle.fileno())
            record = _recorded.get()
            if record is not None:
                record[path] = digest_file(Path(tmp))
            _commit(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """Inside the block, an ``OSError`` without a file name is raised again (same errno, so the same class) naming
    ``path``; the original is its cause.

    >>> import errno
    >>> with naming("/out/a.run"):
    ...     raise OSError(errno.ENOSPC, "No space left on device")
    Traceback (most recent call last):
    ...
    OSError: [Errno 28] No space left on device: '/out/a.run'
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc


def write_atomic_digest(path: Path, writer: Callable[[IO[Any]], None], *, binary: bool = False) -> Digest:
    """``write_atomic``, returning the digest of the bytes written (hashed before they were renamed into place)."""
    with recorded_writes() as written:
        write_atomic(path, writer, binary=binary)
    return written[Path(path)]


@contextlib.contextmanager
def recorded_writes() -> Iterator[dict[Path, Digest]]:
    """Within this context, every ``write_atomic`` records ``path -> Digest`` of what it wrote.

    The digest is of the temporary file, before its rename: a manifest that records it names what this
    process wrote, even if another process replaced the file in between.
    """
    written: dict[Path, Digest] = {}
    token = _recorded.set(written)
    try:
        yield written
    finally:
        _recorded.reset(token)


def remove_file(path: Path) -> None:
    """Remove ``path`` if it is there (a change of the store, like a write)."""
    if Path(path).exists():
        _unlink(Path(path))


def _commit(tmp: str, path: Path) -> None:
    """Move a finished temporary file into place."""
    os.replace(tmp, path)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def clean_temp_files(directory: Path) -> list[Path]:
    """Remove the temporary files that killed writers left in ``directory``; returns what was removed.

    A temporary file is left alone while the process named in it runs (it is still writing), and a file of an
    older r2med (no process in its name) until it is a day old.
    """
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match is None:
            continue
        try:
            if match.group(1) is not None:
                if _alive(int(match.group(1))):
                    continue
            elif now - entry.stat().st_mtime < _OLD_TEMP_S:
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or cannot tell: leave its file
    return True


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return write_atomic(path, lambda handle: handle.write(text))


def strict_json(value: Any, **options: Any) -> str:
    """``value`` as strict JSON (RFC 8259): no ``NaN`` or ``Infinity``, which Python's ``json`` would write and strict
    readers refuse (ValueError instead); non-ASCII kept, except in a text with a lone surrogate (kept as its escape,
    losslessly, since UTF-8 cannot hold it).

    >>> strict_json({"s": [1.5, "é"]}), strict_json("\\ud800")
    ('{"s": [1.5, "é"]}', '"\\\\ud800"')
    >>> strict_json([float("nan")])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Out of range float values are not JSON compliant...
    """
    line = json.dumps(value, ensure_ascii=False, allow_nan=False, **options)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(value, allow_nan=False, **options)
    return line


def write_strict(path: Path, rows: Iterable[Any] | None = None, *, document: Any = None) -> Path:
    """Write ``rows`` as JSON lines, or ``document`` as one indented JSON document, to ``path`` atomically, in strict
    JSON (``strict_json``). A number that is NaN or infinite is an InvalidInputError naming the file, and nothing is
    written: numbers are checked where they come in (a retrieval server's scores, a run file's), so this is the last
    guard, not the rule."""
    from r2med.errors import InvalidInputError

    def body(handle: IO[str]) -> None:
        if rows is None:
            handle.write(strict_json(document, indent=2, default=str))
            return
        for row in rows:
            handle.write(strict_json(row) + "\n")

    try:
        return write_atomic(path, body)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):
            raise
        raise InvalidInputError(f"{path}: not written: {exc}; JSON has no such number (a strict reader refuses "
                                "NaN and Infinity)") from None


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSON lines (UTF-8, non-ASCII kept) to ``path`` atomically, in strict JSON (``write_strict``:
    a NaN or infinite number is an InvalidInputError naming the file, and nothing is written)."""
    return write_strict(path, rows)
