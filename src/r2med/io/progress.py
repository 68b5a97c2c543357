"""The one progress bar of every long step: index building, encoding, generation, reranking, agent runs.

``progress_bar(total, desc=..., unit=..., enabled=...)`` is a tqdm bar on stderr (tqdm's default format: count,
elapsed time, ETA and rate in ``unit``/s), or, when ``enabled`` is False, a stand-in that imports nothing, starts
no thread and writes nothing. The CLI turns every bar off with ``-q`` and ``--json`` by passing ``progress=False``
down to the library; a library caller does the same. Both kinds are context managers with ``update(n)``,
``set_postfix(**values)`` and ``close()``.

While one of r2med's bars is drawn, the bars huggingface_hub (a model's download) and transformers ("Loading
weights") would draw on their own are off: a second bar under r2med's, on a stream that is not a terminal (a log
file, CI, a pipe), leaves a stale line of r2med's bar, a blank line and tqdm's cursor-up escape (``ESC[A``) behind.
They are back as they were once the last of r2med's bars closes.

``Reporter`` is the callback a step hands to the layer that does the work, so the bar moves as each batch is
done (``reporter(n)``: ``n`` more items finished), not once per cache chunk.

>>> with progress_bar(3, desc="nothing", unit="doc", enabled=False) as bar:
...     bar.update(2)
...     bar.set_postfix(cached=1)
>>> bar.n
2
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    """The tqdm bar (one seam, so a test can record the bars a step creates).

    tqdm's own terminal bar (``tqdm.std``); ``tqdm.auto``, which picks the notebook widget under IPython, only when
    IPython is loaded: outside a notebook ``tqdm.auto`` gives the same bar through ``tqdm.asyncio``, which imports
    asyncio (15 ms of every command's start-up) for async iteration that r2med never does.
    """
    if "IPython" in sys.modules:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm

    return tqdm(**options)


def progress_bar(total: int | None, *, desc: str, unit: str, enabled: bool = True, leave: bool = False) -> Any:
    """A bar over ``total`` items of ``unit`` (``doc``, ``query``, ``pair``, ``window``, ...) named ``desc``.

    ``leave=False`` (the default) removes the bar when it closes, so the per-dataset result lines stay readable.
    """
    if not enabled:
        return SilentBar(total)
    _OTHER_BARS.hold()
    try:
        bar = _make_tqdm(total=total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True)
    except BaseException:
        _OTHER_BARS.release()
        raise
    close, released = bar.close, threading.Event()

    def close_and_release() -> None:  # tqdm's __exit__ and __del__ call close too: released once
        try:
            close()
        finally:
            if not released.is_set():
                released.set()
                _OTHER_BARS.release()

    bar.close = close_and_release
    return bar


class _OtherBars:
    """The third-party bars, off from the first of r2med's bars opened to the last closed (bars may nest, or be
    drawn from several threads). huggingface_hub is not imported for it (asyncio and 10 ms that a BM25 run does not
    need): when it is not imported yet, the switch waits for ``others_imported``, which ``r2med.hf.require`` calls
    once it has imported transformers or sentence-transformers (the only way r2med loads a model's weights)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._off: Any = None

    def hold(self) -> None:
        with self._lock:
            self._open += 1
            if "huggingface_hub" in sys.modules:
                self._switch_off()

    def others_imported(self) -> None:
        with self._lock:
            if self._open:
                self._switch_off()

    def _switch_off(self) -> None:
        if self._off is None:
            off = library_bars_off()
            off.__enter__()
            self._off = off

    def release(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0 and self._off is not None:
                off, self._off = self._off, None
                off.__exit__(None, None, None)


_OTHER_BARS = _OtherBars()


def others_imported() -> None:
    """huggingface_hub or transformers was just imported: if one of r2med's bars is drawn, theirs are off now."""
    _OTHER_BARS.others_imported()


@contextmanager
def library_bars_off() -> Iterator[None]:
    """Within the block, the bars that huggingface_hub (downloads) and transformers ("Loading weights") draw on
    their own are off; afterwards each is as it was. The CLI wraps a command in this for ``-q`` and ``--json``.

    Both keep their switch in their module; transformers copies the hub's when it is imported, so a transformers
    first imported inside the block starts with its bars off too, and is switched back on after it.
    """
    from huggingface_hub import utils as hub

    hub_was_on = not hub.are_progress_bars_disabled()
    transformers_was_on = _transformers_bars_on()
    hub.disable_progress_bars()
    if transformers_was_on:
        sys.modules["transformers.utils.logging"].disable_progress_bar()
    try:
        yield
    finally:
        if transformers_was_on or (transformers_was_on is None and hub_was_on and _transformers_bars_on() is False):
            sys.modules["transformers.utils.logging"].enable_progress_bar()  # switches the hub's on too
        if hub_was_on:
            hub.enable_progress_bars()
        else:
            hub.disable_progress_bars()


def _transformers_bars_on() -> bool | None:
    """Whether transformers draws its bars (None: transformers is not imported)."""
    logging = sys.modules.get("transformers.utils.logging")
    return None if logging is None else bool(logging.is_progress_bar_enabled())
