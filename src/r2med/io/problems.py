"""Collects what is wrong with input files, each with its file and line.

Fatal problems (``error``) are kept one by one; frequent benign findings (``count``) are aggregated
into one line with their total and the first few places, so a 60,000-row corpus with 5,000 empty
texts gives one readable line, not 5,000.

>>> p = Problems()
>>> p.error("q.jsonl", 3, "missing field 'text'")
>>> p.count("empty", "c.jsonl", 7, "documents with empty text (kept)")
>>> p.count("empty", "c.jsonl", 9, "documents with empty text (kept)")
>>> p.errors
["q.jsonl:3: missing field 'text'"]
>>> p.warnings
['c.jsonl: 2 documents with empty text (kept) (first at lines 7, 9)']
"""

from __future__ import annotations

from dataclasses import dataclass, field

_SHOW = 3


@dataclass
class _Tally:
    path: str
    message: str
    total: int = 0
    lines: list[int] = field(default_factory=list)


class Problems:
    """Errors (fatal, each listed) and tallies (warnings, aggregated) found while reading input."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._notes: list[str] = []
        self.infos: list[str] = []

    def error(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line else path
        self.errors.append(f"{where}: {message}")

    def count(self, kind: str, path: str, line: int | None, message: str) -> None:
        tally = self._tallies.setdefault((kind, path), _Tally(path, message))
        tally.total += 1
        if line and len(tally.lines) < _SHOW:
            tally.lines.append(line)

    def note(self, message: str) -> None:
        """A finding that is not tied to a line (a cross-file check)."""
        self._notes.append(message)

    def info(self, message: str) -> None:
        """A fact worth saying with ``-v`` but no warning: the data are used as the benchmark's conventions say."""
        self.infos.append(message)

    @property
    def warnings(self) -> list[str]:
        out = []
        for tally in self._tallies.values():
            where = ""
            if tally.lines:
                label = "line" if len(tally.lines) == 1 else "lines"
                where = f" (first at {label} {', '.join(map(str, tally.lines))})"
            out.append(f"{tally.path}: {tally.total} {tally.message}{where}")
        return out + list(self._notes)

    @property
    def ok(self) -> bool:
        return not self.errors
