"""Record the progress bars a step creates: ``bars = record_bars(monkeypatch)`` replaces tqdm behind
``r2med.io.progress.progress_bar`` with ``RecordedBar`` objects that keep every update, and returns the list
they are appended to as they are created."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecordedBar:
    total: int | None
    desc: str
    unit: str
    leave: bool
    updates: list[int] = field(default_factory=list)
    postfix: dict = field(default_factory=dict)
    closed: bool = False

    @property
    def n(self) -> int:
        return sum(self.updates)

    def update(self, n: int = 1) -> None:
        self.updates.append(n)

    def set_postfix(self, *args, refresh: bool = True, **values) -> None:
        self.postfix.update(values)

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def record_bars(monkeypatch) -> list[RecordedBar]:
    from r2med.io import progress

    bars: list[RecordedBar] = []

    def make(*, total, desc, unit, leave, **options) -> RecordedBar:
        bars.append(RecordedBar(total, desc, unit, leave))
        return bars[-1]

    monkeypatch.setattr(progress, "_make_tqdm", make)
    return bars


def forbid_bars(monkeypatch) -> None:
    """Make creating any real bar fail the test (for steps run with progress off)."""
    from r2med.io import progress

    def make(**options):
        raise AssertionError(f"a progress bar was created with progress off: {options}")

    monkeypatch.setattr(progress, "_make_tqdm", make)
