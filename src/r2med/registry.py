"""Name -> spec lookup: case-insensitive, with aliases and "did you mean" suggestions.

>>> reg = Registry("retriever", {"bm25": 1, "bge": 2}, aliases={"BM-25": "bm25"})
>>> reg.get("BM25"), reg.get("bm-25")
(1, 1)
>>> reg.get("bgee")
Traceback (most recent call last):
...
r2med.errors.UsageError: unknown retriever 'bgee'; did you mean 'bge'? Valid: bge, bm25
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from r2med.errors import UsageError

T = TypeVar("T")


def _fold(name: str) -> str:
    return name.strip().casefold()


class Registry(Generic[T]):
    """An immutable mapping of canonical names to specs, built from data."""

    def __init__(self, kind: str, specs: Mapping[str, T], aliases: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._specs = dict(specs)
        self._lookup: dict[str, str] = {_fold(name): name for name in self._specs}
        for alias, target in (aliases or {}).items():
            if target not in self._specs:
                raise ValueError(f"alias {alias!r} points at unknown {kind} {target!r}")
            self._lookup.setdefault(_fold(alias), target)

    def names(self) -> list[str]:
        """Canonical names, in the order given."""
        return list(self._specs)

    def canonical(self, name: str) -> str:
        """The canonical spelling of ``name`` (or an alias); UsageError with a suggestion if unknown."""
        key = _fold(name)
        if key in self._lookup:
            return self._lookup[key]
        close = difflib.get_close_matches(key, list(self._lookup), n=1, cutoff=0.6)
        hint = f"; did you mean '{self._lookup[close[0]]}'?" if close else "."
        raise UsageError(f"unknown {self.kind} '{name}'{hint} Valid: {', '.join(sorted(self._specs))}")

    def get(self, name: str) -> T:
        return self._specs[self.canonical(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _fold(name) in self._lookup

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)
