"""A resumable response cache: append-only JSONL, one line per finished request, flushed as written.

A run that is killed loses at most the line it was writing. Reading ignores such a torn last line
(with a warning) and the next append cuts it off before writing, so the file stays one JSON object
per line. A bad line anywhere else is not a kill but damage, and is reported with its line number
(``InvalidInputError``, exit 5): the responses around it were paid for, so they are neither used past
the damage nor thrown away; the user deletes the line (or the file) to regenerate it.

One writer at a time: the file is locked (``flock``, exclusive) from its opening for append until ``close``, and a
second writer (another run sharing a reranker cache under R2MED_HOME) is refused (``ResultsBusyError``, exit 6)
before it writes; the lock dies with its process, so a writer killed with SIGKILL blocks no later run.

The file is read through ``r2med.io.verified.read_log`` like every append-only cache, but without a
checksum over its content: users are told to edit it by hand (delete a line to regenerate it), and a
checksum mismatch would have to throw away every paid response. Its structure is checked line by line.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import IO, Any

from r2med.errors import InvalidInputError, ResultsBusyError
from r2med.io.atomic import naming
from r2med.io.jsonsafe import loads
from r2med.io.verified import read_log

logger = logging.getLogger(__name__)


class ResponseCache:
    """``key -> record`` backed by ``path``; the last line of a key wins.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "g.jsonl"
    >>> cache = ResponseCache(path)
    >>> cache.append("k1", {"text": "a"})
    >>> "k1" in cache, cache.get("k1"), cache.get("k2"), len(cache)
    (True, {'text': 'a'}, None, 1)
    >>> cache.close()  # one writer at a time: a second one is refused while the first holds the file
    >>> _ = path.open("a").write('{"key": "k2", "te')  # a run killed in mid-line
    >>> reopened = ResponseCache(path)
    >>> len(reopened), "k2" in reopened
    (1, False)
    >>> reopened.append("k2", {"text": "b"})
    >>> path.read_text().splitlines()[-1]
    '{"key": "k2", "text": "b"}'
    """

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._records: dict[str, dict[str, Any]] = {}
        self._good_end = 0  # byte offset just past the last good line
        self._missing_newline = False
        self._handle: IO[bytes] | None = None
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        log = read_log(self.path, sealed=False)
        pieces = [*log.lines, (len(log.lines) + 1, len(log.data), log.tail)]  # the last: what follows the last newline
        for index, (number, end, raw) in enumerate(pieces):
            last = index == len(pieces) - 1
            if raw.strip():
                record = self._parse(raw)
                if record is None:
                    if last or all(not rest.strip() for _, _, rest in pieces[index + 1:]):
                        logger.warning("%s:%d: ignoring a torn last line (an interrupted run); it will be generated again",
                                       self.path, number)
                        return
                    raise InvalidInputError(
                        f"{self.path}:{number}: not a cache record (a JSON object with a 'key'); "
                        "delete that line or the file to regenerate it"
                    )
                self._records[record.pop("key")] = record
                self._good_end = end
                self._missing_newline = last
            elif not last:
                self._good_end = end

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any] | None:
        try:
            record = loads(raw)
        except ValueError:  # malformed, or past Python's limits (JSONLimitError)
            return None
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            return None
        return record

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored for ``key`` (without the key), or ``None``."""
        record = self._records.get(key)
        return dict(record) if record is not None else None

    def keys(self) -> list[str]:
        return list(self._records)

    def open_for_append(self) -> None:
        """Open the file for appending now (created when missing; a torn last line cut off): a file that cannot be
        written fails here, before a request whose answer it could not keep is sent."""
        with naming(self.path):
            self._open()

    def _open(self) -> IO[bytes]:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("r+b" if self.path.exists() else "w+b")
            _lock_or_refuse(handle, self.path)
            size = handle.seek(0, os.SEEK_END)
            if size > self._good_end:  # a torn line, or lines another writer added since we read
                handle.seek(self._good_end)
                tail = handle.read()
                if any(self._parse(raw) is not None for raw in tail.split(b"\n") if raw.strip()):
                    handle.close()
                    raise InvalidInputError(f"{self.path}: changed by another process while in use; run one writer at a time")
                logger.warning("%s: cutting off %d bytes of a torn last line", self.path, size - self._good_end)
                handle.truncate(self._good_end)
            handle.seek(0, os.SEEK_END)
            if self._missing_newline:
                handle.write(b"\n")
                self._missing_newline = False
            self._handle = handle
        return self._handle

    def append(self, key: str, record: dict) -> None:
        """Store ``record`` under ``key``: one line, written and flushed to the OS before returning.

        Flushed is enough for a killed process to lose nothing; ``fsync=True`` also survives a crash of
        the machine, at a few milliseconds a line (it blocks the event loop that delivers results).
        """
        body = {k: v for k, v in record.items() if k != "key"}
        line = json.dumps({"key": key, **body}, ensure_ascii=False)
        try:
            data = line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: kept as its JSON escape, losslessly
            line = json.dumps({"key": key, **body})
            data = line.encode("utf-8")
        with naming(self.path):
            handle = self._open()
            try:
                handle.write(data + b"\n")
                handle.flush()
                if self.fsync:
                    os.fsync(handle.fileno())
            except OSError:  # a full disk: the line may be torn; the next append reopens the file and cuts it off
                self._discard()
                raise
        self._good_end = handle.tell()
        self._records[key] = json.loads(line)  # what a reader of the file gets back
        del self._records[key]["key"]

    def _discard(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:  # what it still buffered cannot be written either
                pass

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _lock_or_refuse(handle: IO[bytes], path: Path) -> None:
    """One writer per cache file: an exclusive ``flock`` on the open file, held until it is closed (the kernel's: a
    killed writer leaves none). A second writer (another run with the same LLM and R2MED_HOME: a shared reranker
    cache) is refused before it writes, instead of overwriting the first one's lines at the same offsets."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform: one writer is the user's to ensure
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ResultsBusyError(f"{path}: another r2med process is writing this response cache; wait for it to "
                               "finish (its answers are kept there), then rerun") from None
