"""One writer per results directory: ``<output>/.r2med.lock``, held with ``flock`` (exclusive, non-blocking).

A second r2med process that wants the same directory is refused at once (``ResultsBusyError``, exit 6) with the
pid of the holder. The lock is the kernel's: it dies with its process, so a killed run leaves no stale lock
(the file may stay; it is only a name). A run releases it, and removes the file, when it ends.

The directory is checked writable before anything is made in it (``UsageError``, exit 2, naming it): a folder
where nothing can be created is found before any work or paid request, not at its first write.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from r2med.errors import ResultsBusyError, UsageError
from r2med.io.atomic import naming
from r2med.io.dirs import dir_problem

LOCK_NAME = ".r2med.lock"


class DirectoryLock:
    """The lock of ``directory``; ``acquire()`` (idempotent) creates the directory and takes the lock.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with DirectoryLock(folder) as lock:
    ...     lock.acquire()
    ...     lock.held
    True
    >>> lock.held
    False
    """

    def __init__(self, directory: Path | str, *, what: str = "the folder",
                 fix: str = "make it writable, or write elsewhere",
                 busy_fix: str = "wait for it to finish, or write to another --output") -> None:
        self.directory = Path(directory)
        self.what = what
        self.fix = fix
        self.busy_fix = busy_fix
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise ``ResultsBusyError`` naming the process that holds it (``UsageError`` when the
        directory cannot be written: nothing is made in it)."""
        if self._fd is not None:
            return
        problem = dir_problem(self.directory)
        if problem is not None:
            raise UsageError(f"{self.what} {self.directory}: {problem}; {self.fix}")
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no flock on this platform: one writer is the user's to ensure
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                who = f" (pid {holder})" if holder else ""
                raise ResultsBusyError(
                    f"another r2med process{who} is using {self.directory} (it holds {self.path}); {self.busy_fix}"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the holder we waited on may have removed the file: lock the file that is there now
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            with naming(self.path):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Give the lock back and remove the file (removed first, so that no one locks a file on its way out)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def __enter__(self) -> DirectoryLock:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
