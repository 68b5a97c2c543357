"""Batches cut to a token budget, and their retry on out-of-memory: shared by the local dense encoders and the
local pointwise rerankers (one loop, not one per model family).

The inputs are tokenized once up front; their token counts decide everything here. ``longest_first`` sorts them
(stable for equal counts), ``TokenBudget.cut`` takes the next batch from that order: as many inputs as fit in
``tokens`` *padded* tokens (a batch is padded to its own longest input, which in this order is its first) and at
most ``texts`` inputs. ``run_batches`` runs a callable over those batches; when it raises an out-of-memory error
(``torch.OutOfMemoryError``, CUDA's and MPS's), the budget of that batch is halved and the batch is tried again,
every finished batch kept; the first batch that then fits is reported once (a warning naming the budget that
worked). A single input that does not fit alone is ``TextTooLongError`` (exit 6), naming it and its token count.
With ``prepare`` (a batch's host-side work: padding, pinning), the next batch is prepared on a background thread
while the current one runs. With ``finish``, a batch's results are taken to the host only once the next batch has
been launched (``Launched``: on CUDA a non-blocking copy into pinned memory, waited for by its event), so the device
never idles while the host waits for a copy, converts the vectors or stores them.

torch is never imported here: an error is an out-of-memory error only if torch, already imported, says so.

>>> budget = TokenBudget(tokens=10, texts=3)
>>> lengths = [2, 5, 3, 3, 1, 1, 1, 1]
>>> order = longest_first(lengths)
>>> order
[1, 2, 3, 0, 4, 5, 6, 7]
>>> [order[s:e] for s, e in budget.plan(order, lengths)]
[[1, 2], [3, 0, 4], [5, 6, 7]]
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from r2med.errors import ProviderError, UsageError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: On a CPU (or MPS) a batch holds at most this many padded tokens unless asked: larger ones are no faster there.
CPU_BATCH_TOKENS = 8192


def device_budget(tokens: int, device: str, asked: int | None = None) -> int:
    """The token budget on ``device``: ``asked`` when given, else ``tokens`` on CUDA and at most ``CPU_BATCH_TOKENS``
    elsewhere.

    >>> device_budget(32768, "cuda:1"), device_budget(32768, "cpu"), device_budget(32768, "cpu", asked=65536)
    (32768, 8192, 65536)
    """
    if asked is not None:
        return asked
    return tokens if device.startswith("cuda") else min(tokens, CPU_BATCH_TOKENS)


class TextTooLongError(ProviderError):
    """One input alone does not fit in the device's memory (exit 6). ``index``: its position in the inputs of the
    call that failed; ``tokens``: its token count. ``relabel`` names it better where its id is known."""

    def __init__(self, index: int, tokens: int, label: str | None = None, *, device: str = "the device",
                 what: str = "text") -> None:
        self.index, self.tokens, self.device, self.what = index, tokens, device, what
        self.label = label or f"{what} #{index}"
        super().__init__(
            f"{self.label} ({tokens:,} tokens) does not fit in the memory of {device} even alone, in a batch of "
            f"its own; shorten it or lower the model's max length, use a smaller dtype, or a device with more memory")

    def relabel(self, label: str) -> TextTooLongError:
        """The same error naming the input as ``label`` (``"document 'PMC123'"``)."""
        return TextTooLongError(self.index, self.tokens, label, device=self.device, what=self.what)

    def shifted(self, mapping: Callable[[int], int]) -> TextTooLongError:
        """The same error with its index mapped into an outer list of inputs (a cache chunk into the corpus)."""
        return TextTooLongError(mapping(self.index), self.tokens, None, device=self.device, what=self.what)


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Indices by token count, longest first; equal counts keep their input order.

    >>> longest_first([3, 7, 3, 9])
    [3, 1, 0, 2]
    """
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


@dataclass
class TokenBudget:
    """How much one batch may hold: ``tokens`` padded tokens (None: no token limit) and ``texts`` inputs (None: no
    limit). One object per model, kept across calls: a budget halved after an out-of-memory error stays halved."""

    tokens: int | None
    texts: int | None = None
    #: the budget a batch ran out of memory at, until a smaller one has worked and been reported
    _failed_at: tuple[int | None, int | None] | None = None

    def __post_init__(self) -> None:
        for name, value in (("tokens", self.tokens), ("texts", self.texts)):
            if value is not None and (type(value) is not int or value < 1):
                raise UsageError(f"batch {name} must be an integer >= 1, got {value!r}")

    def cut(self, order: Sequence[int], start: int, lengths: Sequence[int]) -> int:
        """The end of the batch that starts at ``order[start]``: at least one input, then as many as keep
        (inputs x the longest one's tokens) within ``tokens`` and the count within ``texts``."""
        longest = max(1, lengths[order[start]])
        room = len(order) - start
        if self.texts is not None:
            room = min(room, self.texts)
        if self.tokens is not None:
            room = min(room, max(1, self.tokens // longest))
        return start + room

    def plan(self, order: Sequence[int], lengths: Sequence[int]) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of every batch over ``order`` with the budget as it is now."""
        start = 0
        while start < len(order):
            end = self.cut(order, start, lengths)
            yield start, end
            start = end

    def halve(self, rows: int, padded: int) -> None:
        """After a batch of ``rows`` inputs and ``padded`` tokens ran out of memory: half of it from now on."""
        if self._failed_at is None:
            self._failed_at = (self.tokens, self.texts)
        if self.tokens is not None:
            self.tokens = max(1, min(self.tokens, padded) // 2)
        else:
            self.texts = max(1, min(self.texts or rows, rows) // 2)

    def worked(self, name: str) -> None:
        """A batch ran: after an out-of-memory error, say once which budget worked."""
        if self._failed_at is None:
            return
        tokens, texts = self._failed_at
        self._failed_at = None
        if self.tokens is not None:
            logger.warning("%s: out of memory at %s tokens per batch; %s tokens per batch worked and are used from "
                           "now on (--batch-tokens %d starts there)", name, _count(tokens), _count(self.tokens),
                           self.tokens)
        else:
            logger.warning("%s: out of memory at %s texts per batch; %d texts per batch worked and are used from now "
                           "on (--batch-size %d starts there)", name, _count(texts), self.texts, self.texts)


def _count(value: int | None) -> str:
    return "unlimited" if value is None else f"{value:,}"


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's out-of-memory error (CUDA: ``torch.OutOfMemoryError``; MPS: a RuntimeError
    saying so). Without torch imported nothing is.

    >>> is_out_of_memory(MemoryError()), is_out_of_memory(ValueError("out of memory"))
    (False, False)
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and str(exc).startswith("MPS backend out of memory")


def _release_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class Launched:
    """A batch's results as the device left them (a float tensor), on their way to the host: on CUDA copied without
    blocking into pinned memory on the tensor's own device's stream, behind an event recorded on that stream;
    ``result()`` waits for that copy alone and gives a NumPy array. On any other device (MPS) the tensor is copied
    to the host at once; on the CPU it is the host array already."""

    def __init__(self, tensor: Any) -> None:
        self._event = None
        if tensor.device.type == "cuda":
            torch = sys.modules["torch"]
            # the current device may be another GPU (--device cuda:1 in this process): the copy runs on the tensor's
            # device's stream, so the event is recorded on that stream, not on the current device's
            stream = torch.cuda.current_stream(tensor.device)
            host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
            with torch.cuda.stream(stream):
                host.copy_(tensor, non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record(stream)
            tensor = host
        elif tensor.device.type != "cpu":
            tensor = tensor.cpu()
        self._host = tensor

    def result(self) -> Any:
        if self._event is not None:
            self._event.synchronize()
        return self._host.numpy()


def finished(result: Any) -> Any:
    """``result``, or the host array of a ``Launched`` one (the ``finish`` of ``run_batches`` for the encoders)."""
    return result.result() if isinstance(result, Launched) else result


def run_batches(
    lengths: Sequence[int],
    run: Callable[[Any], T],
    budget: TokenBudget,
    *,
    name: str,
    device: str = "the device",
    what: str = "text",
    prepare: Callable[[list[int]], Any] | None = None,
    finish: Callable[[T], Any] | None = None,
) -> Iterator[tuple[list[int], Any]]:
    """``(rows, run(prepare(rows)))`` for every batch of the inputs of ``lengths`` (token counts), longest first, cut
    by ``budget``; an out-of-memory error halves the budget and runs the batch again (see the module docstring).

    ``prepare`` (default: the rows themselves) is a batch's host-side work (padding, pinning): with it, the next
    batch is prepared on a background thread while ``run`` runs the current one, so the device does not wait for
    the host; a prepared batch that the budget no longer cuts the same way (after an out-of-memory error) is
    prepared again. ``finish``: ``(rows, finish(run(...)))`` is yielded once the next batch's ``run`` has returned
    (launched its work) or failed, or at the end, so the device works on the next batch while the host takes this
    one's results; a batch launched before an error or an interrupt is still yielded first. Lazy: a caller that
    stops iterating stops the work; what it has received is done.
    """
    order = longest_first(lengths)
    executor = ThreadPoolExecutor(1, thread_name_prefix="r2med-batch") if prepare is not None else None
    make = prepare if prepare is not None else (lambda rows: rows)
    ahead: tuple[int, int, Future] | None = None  # (start, end, the prepared batch) of the next batch
    pending: tuple[list[int], Any] | None = None  # with finish: the batch launched last, not yet taken to the host
    start = 0
    try:
        while start < len(order):
            end = budget.cut(order, start, lengths)
            rows = order[start:end]
            try:
                if ahead is not None and ahead[:2] == (start, end):
                    inputs = ahead[2].result()
                else:
                    if ahead is not None:
                        ahead[2].cancel()
                    inputs = make(rows)
            except BaseException:  # preparing failed or was interrupted: the batch launched before is kept
                if pending is not None:
                    done, pending = pending, None
                    yield done[0], finish(done[1])  # type: ignore[misc]  # pending only with finish
                raise
            ahead = None
            if executor is not None and end < len(order):
                following = budget.cut(order, end, lengths)
                ahead = (end, following, executor.submit(make, order[end:following]))
            try:
                result = run(inputs)
            except BaseException as exc:
                if not is_out_of_memory(exc):
                    if pending is not None:  # launched before the error: done, and kept
                        done, pending = pending, None
                        yield done[0], finish(done[1])  # type: ignore[misc]  # pending only with finish
                    raise
                out_of_memory = True  # retried below, outside this block: the traceback's tensors are freed first
            else:
                out_of_memory = False
            del inputs
            if pending is not None:  # the batch before is done on the device: to the host, while this one runs
                done, pending = pending, None
                yield done[0], finish(done[1])  # type: ignore[misc]
            if out_of_memory:
                _release_memory()
                if len(rows) == 1:
                    raise TextTooLongError(rows[0], lengths[rows[0]], device=device, what=what) from None
                budget.halve(len(rows), len(rows) * max(1, lengths[rows[0]]))
                continue
            budget.worked(name)
            start = end
            if finish is None:
                yield rows, result
            else:
                pending = (rows, result)
        if pending is not None:
            done, pending = pending, None
            yield done[0], finish(done[1])
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def run_in_order(
    lengths: Sequence[int],
    run: Callable[[list[int]], Sequence[T]],
    budget: TokenBudget,
    *,
    name: str,
    device: str = "the device",
    what: str = "text",
    prepare: Callable[[list[int]], Any] | None = None,
) -> list[T]:
    """Every input's result, in input order: ``run(prepare(rows))`` returns one result per row of a batch
    (``run_batches``).

    >>> run_in_order([1, 3, 2], lambda rows: [10 * r for r in rows], TokenBudget(tokens=4), name="demo")
    [0, 10, 20]
    """
    out: list[T | None] = [None] * len(lengths)
    for rows, results in run_batches(lengths, run, budget, name=name, device=device, what=what, prepare=prepare):
        if len(results) != len(rows):
            raise RuntimeError(f"{name}: {len(results)} results for a batch of {len(rows)}")
        for row, result in zip(rows, results):
            out[row] = result
    return out  # type: ignore[return-value]  # every row is in one batch
