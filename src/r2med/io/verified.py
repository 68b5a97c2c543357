"""The one verified reader: no stored file (result set, index, embeddings, scores) is used before it matches the
sha256 and size r2med recorded when it wrote it.

Where the digest is kept:

- in a sidecar ``<file>.sha256`` (``{"sha256": ..., "size": ...}``) written after the file by ``write_verified``
  (embedding chunks); a file without its sidecar is unconfirmed (its write was interrupted) and not trusted;
- in a record that names the file (``read_verified(path, expected=digest)``): a result set's manifest records
  every file of the set, a BM25 ``index.json`` records its ``index.npz``;
- inside a JSON object itself (``write_verified_json``/``read_verified_json``): the sha256 of its canonical
  form under ``self_sha256``;
- for an append-only log (``read_log``/``LogSeal``): a sidecar over the prefix r2med has appended so far; bytes
  after it can only come from a run killed between an append and its checksum, and are read line by line.

Any mismatch, missing checksum or read error is a ``DamagedFileError`` that names the file and what is wrong:
the caller logs it and recomputes (or, where it cannot, stops with it).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from r2med.errors import DamagedFileError, InvalidInputError
from r2med.io.atomic import remove_file, write_atomic, write_atomic_digest, write_text_atomic
from r2med.io.digest import Digest, digest_file

T = TypeVar("T")

SIDECAR_SUFFIX = ".sha256"
SELF_FIELD = "self_sha256"
#: what reading a file that is not what it should be raises (besides a checksum mismatch)
READ_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile, InvalidInputError)


def sidecar(path: Path) -> Path:
    """``<dir>/<name>`` -> ``<dir>/<name>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_verified(path: Path, writer: Callable[[IO[Any]], None], *, binary: bool = False) -> Digest:
    """Write ``path`` atomically, then its sidecar with the digest of what was written; returns the digest."""
    digest = write_atomic_digest(path, writer, binary=binary)
    write_text_atomic(sidecar(path), json.dumps(digest.to_json(), sort_keys=True) + "\n")
    return digest


def remove_verified(path: Path) -> None:
    """Remove a file and its sidecar (the sidecar first: a file without one is never trusted)."""
    remove_file(sidecar(path))
    remove_file(path)


def read_sidecar(path: Path) -> Digest | None:
    """The digest the sidecar of ``path`` records; None without a sidecar; DamagedFileError when it is unreadable."""
    car = sidecar(path)
    try:
        text = car.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedFileError(car, f"cannot be read ({exc})") from exc
    try:
        return Digest.from_json(json.loads(text))
    except ValueError as exc:
        raise DamagedFileError(car, f"is not a checksum record ({exc})") from exc


def verify_file(path: Path, expected: Digest) -> None:
    """DamagedFileError unless ``path`` has exactly the size and sha256 of ``expected``."""
    path = Path(path)
    try:
        actual = digest_file(path)
    except FileNotFoundError:
        raise DamagedFileError(path, "is missing") from None
    except OSError as exc:
        raise DamagedFileError(path, f"cannot be read ({exc})") from exc
    if actual.size != expected.size:
        raise DamagedFileError(path, f"does not match the checksum r2med recorded: {actual.size} bytes where it "
                                     f"wrote {expected.size} (cut short, or written over)")
    if actual.sha256 != expected.sha256:
        raise DamagedFileError(path, f"does not match the checksum r2med recorded: sha256 {actual.sha256[:12]}... "
                                     f"where it wrote {expected.sha256[:12]}... (changed or damaged)")


def read_verified(path: Path, parse: Callable[[Path], T], *, expected: Digest | None = None) -> T:
    """``parse(path)`` once ``path`` matches ``expected`` (default: its sidecar), and only if it did not change meanwhile.

    Raises DamagedFileError for a missing checksum, a mismatch, a file ``parse`` cannot read, or a file that
    changed while it was parsed.
    """
    path = Path(path)
    if expected is None:
        expected = read_sidecar(path)
        if expected is None:
            raise DamagedFileError(path, f"has no checksum ({sidecar(path).name} is missing: its write was "
                                         "interrupted, or an older r2med wrote it)")
    try:
        before = os.stat(path)
    except OSError:
        before = None
    verify_file(path, expected)
    try:
        value = parse(path)
    except READ_ERRORS as exc:
        raise DamagedFileError(path, f"cannot be read back ({type(exc).__name__}: {exc})") from exc
    try:
        after = os.stat(path)
    except OSError:
        after = None
    if before is None or after is None or file_identity(before) != file_identity(after):
        raise DamagedFileError(path, "changed while it was being read")
    return value


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells a file's content changed without reading it: device, inode, size and modification time."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def json_sha256(value: Any) -> str:
    """sha256 of the canonical JSON of ``value`` (keys sorted, no spaces, UTF-8).

    >>> json_sha256({"b": 1, "a": [1.5, "é"]}) == json_sha256({"a": [1.5, "é"], "b": 1})
    True
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_verified_json(path: Path, value: dict[str, Any], *, indent: int | None = None) -> Path:
    """Write ``value`` with the sha256 of its canonical JSON under ``self_sha256`` (atomically)."""
    sealed = {**value, SELF_FIELD: json_sha256(value)}
    payload = json.dumps(sealed, ensure_ascii=False, indent=indent, sort_keys=indent is not None)
    return write_atomic(path, lambda handle: handle.write(payload.encode("utf-8")), binary=True)


def read_verified_json(path: Path, *, precheck: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """A JSON object written by ``write_verified_json``, without its ``self_sha256``, once that matches.

    ``precheck(obj)`` runs first (a format check with a better message than a mismatch).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DamagedFileError(path, "is missing") from None
    except OSError as exc:
        raise DamagedFileError(path, f"cannot be read ({exc})") from exc
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise DamagedFileError(path, f"is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise DamagedFileError(path, f"is not a JSON object (got {type(value).__name__})")
    if precheck is not None:
        precheck(value)
    recorded = value.pop(SELF_FIELD, None)
    if recorded is None:
        raise DamagedFileError(path, f"has no checksum (no '{SELF_FIELD}': an older r2med wrote it)")
    if recorded != json_sha256(value):
        raise DamagedFileError(path, "does not match the checksum r2med recorded in it (changed or damaged)")
    return value


# ------------------------------------------------------------------ append-only logs


@dataclass(frozen=True)
class Log:
    """An append-only file as read: its complete lines ``(number, end offset, bytes without the newline)``, the
    unterminated ``tail`` after them (a torn line, or a last record without its newline), and whether a checksum
    covered its first ``sealed`` bytes."""

    path: Path
    data: bytes
    lines: list[tuple[int, int, bytes]]
    tail: bytes
    sealed: int


def read_log(path: Path, *, sealed: bool = True) -> Log:
    """Read an append-only file; with ``sealed``, check the prefix its sidecar covers (DamagedFileError on mismatch)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(path, f"cannot be read ({exc})") from exc
    covered = 0
    if sealed:
        expected = read_sidecar(path)
        if expected is not None:
            if len(data) < expected.size or Digest.of(data[: expected.size]) != expected:
                raise DamagedFileError(path, f"does not match the checksum r2med recorded for its first "
                                             f"{expected.size} bytes (changed, cut or damaged)")
            covered = expected.size
    lines = []
    start = 0
    number = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            break
        number += 1
        lines.append((number, end + 1, data[start:end]))
        start = end + 1
    return Log(path, data, lines, data[start:], covered)


class LogSeal:
    """The running digest of what an append-only file holds; ``write`` records it in the file's sidecar."""

    def __init__(self, prefix: bytes = b"") -> None:
        self._hash = hashlib.sha256(prefix)
        self.size = len(prefix)

    def extend(self, data: bytes) -> None:
        self._hash.update(data)
        self.size += len(data)

    @property
    def digest(self) -> Digest:
        return Digest(self._hash.hexdigest(), self.size)

    def write(self, path: Path) -> None:
        write_text_atomic(sidecar(path), json.dumps(self.digest.to_json(), sort_keys=True) + "\n")


__all__ = [
    "READ_ERRORS",
    "Digest",
    "Log",
    "LogSeal",
    "digest_file",
    "json_sha256",
    "read_log",
    "read_sidecar",
    "read_verified",
    "read_verified_json",
    "remove_verified",
    "sidecar",
    "verify_file",
    "write_verified",
    "write_verified_json",
]
