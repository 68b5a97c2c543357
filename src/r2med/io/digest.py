"""A file's sha256 and size: what r2med records when it writes a stored file and checks before it trusts one."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Digest:
    """sha256 (hex) and size (bytes) of a file's content.

    >>> d = Digest.of(b"abc")
    >>> d.size, d.sha256[:12]
    (3, 'ba7816bf8f01')
    >>> Digest.from_json(d.to_json()) == d
    True
    """

    sha256: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Digest:
        return cls(hashlib.sha256(data).hexdigest(), len(data))

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, value: Any) -> Digest:
        """From ``{"sha256": <64 hex>, "size": <int >= 0>}``; ValueError for anything else."""
        if not isinstance(value, dict) or set(value) != {"sha256", "size"}:
            raise ValueError(f"expected {{'sha256': ..., 'size': ...}}, got {value!r}")
        sha, size = value["sha256"], value["size"]
        if not (isinstance(sha, str) and _HEX.fullmatch(sha)) or not (type(size) is int and size >= 0):
            raise ValueError(f"not a sha256 and a size: {value!r}")
        return cls(sha, size)


def digest_file(path: Path) -> Digest:
    """The digest of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return Digest(digest.hexdigest(), size)
