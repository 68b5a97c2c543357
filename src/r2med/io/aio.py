"""Run a coroutine to its end from sync code: the one place r2med does (the chat client, the agent loop)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: what a coroutine is given to hand values to the sync caller as it goes
Send = Callable[..., None]


def run_sync(make: Callable[[Send], Awaitable[T]], deliver: Send | None = None) -> T:
    """Run the coroutine ``make(send)`` to its end and return its value; each ``send(*args)`` calls
    ``deliver(*args)`` in the calling thread, as the coroutine goes.

    Also when the caller is inside a running event loop (a notebook): the coroutine then runs on its own loop in a
    helper thread, what it sends is handed over through a queue, and its exception is raised here.

    >>> async def count(send):
    ...     for i in range(3):
    ...         send(i)
    ...     return "done"
    >>> seen = []
    >>> run_sync(count, seen.append), seen
    ('done', [0, 1, 2])
    >>> async def inside():  # an event loop is running: the same, through a helper thread
    ...     return run_sync(count, seen.append)
    >>> asyncio.run(inside()), seen
    ('done', [0, 1, 2, 0, 1, 2])
    """
    deliver = deliver or _ignore
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make(deliver))
    inbox: queue.Queue = queue.Queue()
    done = object()
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(asyncio.run(make(lambda *args: inbox.put(args))))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            errors.append(exc)
        finally:
            inbox.put(done)

    thread = threading.Thread(target=target, name="r2med-async", daemon=True)
    thread.start()
    while (item := inbox.get()) is not done:
        deliver(*item)
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


def _ignore(*args: Any) -> None:
    """What is sent when nobody listens."""
