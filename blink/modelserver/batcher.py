"""Dynamic batching: requests that arrive within a short window run as one model call.

One worker thread per model owns a thread-safe queue, so callers on the event loop (``run``) and
on plain threads (``run_sync``: the router classifier's start-up, ``asyncio.to_thread`` callers)
share the same batches. The worker takes the first waiting item, then keeps collecting until the
batch is full or the window has passed since that first item; a model call that raises fails the
members of that batch only, and the worker goes on with the next one.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from blink.modelserver.stats import BatchStats
from blink.protocol.errors import BackendTimeoutError, InternalServerError, OverloadedError

log = logging.getLogger("blink.modelserver")

# A small model's batch takes milliseconds; a call still running this long after the queue
# timeout has hung, and its callers get a 504 instead of waiting forever.
_HUNG_S = 5.0

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True, slots=True)
class BatchConfig:
    # Largest batch one model call takes; 1 turns batching off.
    max_batch_size: int = 32
    # How long the first item of a batch waits for company: small next to one MiniLM call
    # (benchmarks/RESULTS.md, "Figures behind the code's numbers", batcher).
    window_s: float = 0.002
    # An item still queued after this long fails with a timeout instead of running late.
    timeout_s: float = 1.0
    # Items waiting beyond this are refused at once (503) rather than queued without bound.
    max_queue: int = 4096
    # Skip the window while the previous batch held a single input (no concurrent load).
    adaptive_window: bool = True


class _Request(Generic[Out]):
    """One caller's inputs: rows fill in as batches finish; the future resolves when all are in.

    An async caller's future is an ``asyncio.Future`` and is only touched on its loop: the worker
    hands each finished batch's rows to that loop in one ``call_soon_threadsafe`` (a per-input
    ``concurrent.futures.Future`` + ``wrap_future`` + ``gather`` cost the loop more than the rest).
    A thread caller's future is a ``concurrent.futures.Future``, set by the worker directly.
    """

    __slots__ = ("future", "left", "loop", "rows")

    def __init__(self, n: int, future: asyncio.Future[list[Out]] | Future[list[Out]],
                 loop: asyncio.AbstractEventLoop | None) -> None:  # fmt: skip
        self.rows: list[Out | None] = [None] * n
        self.left = n
        self.future = future
        self.loop = loop

    def settle(self, index: int, row: Out | None, error: BaseException | None) -> None:
        """Runs on the future's owner (its loop, or the worker for thread callers)."""
        if self.future.done():  # cancelled, timed out, or already failed by another input
            return
        try:
            if error is not None:
                self.future.set_exception(error)
                return
            self.rows[index] = row
            self.left -= 1
            if self.left == 0:
                self.future.set_result(self.rows)  # type: ignore[arg-type]
        except InvalidStateError:  # a thread caller cancelled between the check and the set
            pass


@dataclass(slots=True)
class _Item(Generic[In, Out]):
    value: In
    request: _Request[Out]
    index: int
    enqueued: float


_Outcome = tuple["_Request[Any]", int, Any, "BaseException | None"]


def _settle_all(outcomes: list[_Outcome]) -> None:
    for request, index, row, error in outcomes:
        request.settle(index, row, error)


class DynamicBatcher(Generic[In, Out]):
    """Runs ``run_batch(list_of_inputs) -> one output per input`` on batches of queued inputs.

    ``run_batch`` may put an exception in an input's place: that input's caller gets it, the
    rest of the batch is unaffected (per-input validation in the model's own pass).
    """

    def __init__(self, name: str, run_batch: Callable[[list[In]], Sequence[Out | BaseException]],
                 config: BatchConfig) -> None:  # fmt: skip
        self.name = name
        self.config = config
        self.stats = BatchStats()
        self._run_batch = run_batch
        # Size of the previous batch, written and read by the worker thread only.
        self._last_size = 0
        # SimpleQueue: a C put/get without Queue's Python-level lock and condition.
        self._queue: queue.SimpleQueue[_Item[In, Out] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"blink-batch-{name}", daemon=True)
        self._thread.start()

    def submit(self, values: Sequence[In], loop: asyncio.AbstractEventLoop | None = None) -> _Request[Out]:
        """Queue ``values`` as one request; its future is an asyncio one when ``loop`` is given."""
        if self._queue.qsize() + len(values) > self.config.max_queue:
            self.stats.rejected += len(values)
            raise OverloadedError(f"Model '{self.name}' has too many queued inputs; retry shortly.")
        future: asyncio.Future[list[Out]] | Future[list[Out]] = loop.create_future() if loop is not None else Future()
        request: _Request[Out] = _Request(len(values), future, loop)
        now = time.monotonic()
        for i, v in enumerate(values):
            self._queue.put(_Item(v, request, i, now))
        return request

    async def run(self, values: Sequence[In]) -> list[Out]:
        """One output per value, in order; awaits without blocking the event loop."""
        loop = asyncio.get_running_loop()
        request = self.submit(values, loop)
        # A bare timer, not asyncio.timeout(): that context manager was a visible share of the
        # loop's time per request (same RESULTS.md entry as the window above). Queueing + one model call; past it the call has hung.
        timer = loop.call_later(self.config.timeout_s + _HUNG_S, self._expire, request.future)
        try:
            return await request.future  # type: ignore[misc]
        finally:
            timer.cancel()
            request.future.cancel()  # no-op once done; the worker skips a gone caller's inputs

    def _expire(self, future: asyncio.Future[list[Out]]) -> None:
        if not future.done():
            future.set_exception(BackendTimeoutError(f"Model '{self.name}' did not answer in time."))

    def run_sync(self, values: Sequence[In]) -> list[Out]:
        """``run`` for callers on plain threads (never call it on the event loop: it blocks)."""
        future = self.submit(values).future
        assert isinstance(future, Future)
        try:
            return future.result(timeout=self.config.timeout_s + _HUNG_S)
        except TimeoutError:
            raise BackendTimeoutError(f"Model '{self.name}' did not answer in time.") from None
        finally:
            future.cancel()

    def queue_depth(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _collect(self, first: _Item[In, Out]) -> tuple[list[_Item[In, Out]], bool]:
        # Wait for company only under load (the last batch had some): a lone caller at
        # concurrency 1 would otherwise pay the whole window for nothing.
        if self.config.adaptive_window and self._last_size <= 1:
            return self._drain(first)
        batch, deadline = [first], time.monotonic() + self.config.window_s
        while len(batch) < self.config.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _drain(self, first: _Item[In, Out]) -> tuple[list[_Item[In, Out]], bool]:
        """Idle: take only what is already queued, no timed wait and no ``queue.Empty`` raised (the
        lone caller's model call starts at once; its inputs that arrived meanwhile still batch)."""
        batch, q = [first], self._queue
        while len(batch) < self.config.max_batch_size and q.qsize():
            item = q.get_nowait()
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._collect(first)
            self._last_size = len(batch)
            self._execute(batch)

    def _execute(self, batch: list[_Item[In, Out]]) -> None:
        start = time.monotonic()
        live: list[_Item[In, Out]] = []
        outcomes: list[_Outcome] = []
        for item in batch:
            if item.request.future.done():
                continue  # the caller gave up (timeout, disconnect) or another input failed it
            if start - item.enqueued > self.config.timeout_s:
                self.stats.timed_out += 1
                error = BackendTimeoutError(f"Model '{self.name}' queue wait exceeded its timeout.")
                outcomes.append((item.request, item.index, None, error))
                continue
            live.append(item)
        if live:
            try:
                rows = self._run_batch([item.value for item in live])
                if len(rows) != len(live):
                    raise RuntimeError(f"model returned {len(rows)} rows for {len(live)} inputs")
            except Exception:
                log.exception("model %s failed on a batch of %d", self.name, len(live))
                self.stats.record_failure(len(live))
                error = InternalServerError(f"Model '{self.name}' failed on this input's batch.")
                outcomes += [(item.request, item.index, None, error) for item in live]
            else:
                self.stats.record_batch(len(live), time.monotonic() - start, sum(start - i.enqueued for i in live))
                for item, row in zip(live, rows, strict=True):
                    err = row if isinstance(row, BaseException) else None
                    outcomes.append((item.request, item.index, None if err else row, err))
        self._deliver(outcomes)

    @staticmethod
    def _deliver(outcomes: list[_Outcome]) -> None:
        """Thread callers are settled here; each event loop gets its share in one hand-off."""
        if len(outcomes) == 1:  # a lone input (concurrency 1): one call, no grouping
            request, index, row, error = outcomes[0]
            if request.loop is None:
                request.settle(index, row, error)
                return
            try:
                request.loop.call_soon_threadsafe(request.settle, index, row, error)
            except RuntimeError:  # the loop closed while its caller waited
                pass
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for outcome in outcomes:
            loop = outcome[0].loop
            if loop is None:
                outcome[0].settle(*outcome[1:])
            else:
                by_loop.setdefault(loop, []).append(outcome)
        for loop, share in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, share)
            except RuntimeError:  # the loop closed while its callers waited: nobody to tell
                pass
