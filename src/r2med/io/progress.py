"""The one progress bar of every long step: index building, encoding, generation, reranking, agent runs.

``progress_bar(total, desc=..., unit=..., enabled=...)`` is a tqdm bar on stderr (tqdm's default format: count,
elapsed time, ETA and rate in ``unit``/s), or, when ``enabled`` is False, a stand-in that imports nothing, starts
no thread and writes nothing. The CLI turns every bar off with ``-q`` and ``--json`` by passing ``progress=False``
down to the library; a library caller does the same. Both kinds are context managers with ``update(n)``,
``set_postfix(**values)`` and ``close()``.

``Reporter`` is the callback a step hands to the layer that does the work, so the bar moves as each batch is
done (``reporter(n)``: ``n`` more items finished), not once per cache chunk.

>>> with progress_bar(3, desc="nothing", unit="doc", enabled=False) as bar:
...     bar.update(2)
...     bar.set_postfix(cached=1)
>>> bar.n
2
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``reporter(n)``: ``n`` more items are done
Reporter = Callable[[int], None]


class SilentBar:
    """A bar that counts and prints nothing (what ``progress_bar`` gives when progress is off)."""

    def __init__(self, total: int | None = None) -> None:
        self.total = total
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _make_tqdm(**options: Any) -> Any:
    """The tqdm bar (one seam, so a test can record the bars a step creates)."""
    from tqdm.auto import tqdm

    return tqdm(**options)


def progress_bar(total: int | None, *, desc: str, unit: str, enabled: bool = True, leave: bool = False) -> Any:
    """A bar over ``total`` items of ``unit`` (``doc``, ``query``, ``pair``, ``window``, ...) named ``desc``.

    ``leave=False`` (the default) removes the bar when it closes, so the per-dataset result lines stay readable.
    """
    if not enabled:
        return SilentBar(total)
    return _make_tqdm(total=total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True)
