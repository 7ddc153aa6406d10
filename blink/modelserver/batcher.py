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
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

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
    # How long the first item of a batch waits for company (2 ms: small next to a 7 ms MiniLM call).
    window_s: float = 0.002
    # An item still queued after this long fails with a timeout instead of running late.
    timeout_s: float = 1.0
    # Items waiting beyond this are refused at once (503) rather than queued without bound.
    max_queue: int = 4096
    # Skip the window while the previous batch held a single input (no concurrent load).
    adaptive_window: bool = True


@dataclass(slots=True)
class _Item(Generic[In, Out]):
    value: In
    future: Future[Out]
    enqueued: float


class DynamicBatcher(Generic[In, Out]):
    """Runs ``run_batch(list_of_inputs) -> one output per input`` on batches of queued inputs."""

    def __init__(self, name: str, run_batch: Callable[[list[In]], Sequence[Out]], config: BatchConfig) -> None:
        self.name = name
        self.config = config
        self.stats = BatchStats()
        self._run_batch = run_batch
        # Size of the previous batch, written and read by the worker thread only.
        self._last_size = 0
        self._queue: queue.Queue[_Item[In, Out] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"blink-batch-{name}", daemon=True)
        self._thread.start()

    def submit(self, values: Sequence[In]) -> list[Future[Out]]:
        if self._queue.qsize() + len(values) > self.config.max_queue:
            self.stats.rejected += len(values)
            raise OverloadedError(f"Model '{self.name}' has too many queued inputs; retry shortly.")
        now = time.monotonic()
        items: list[_Item[In, Out]] = [_Item(v, Future(), now) for v in values]
        for item in items:
            self._queue.put(item)
        return [item.future for item in items]

    async def run(self, values: Sequence[In]) -> list[Out]:
        """One output per value, in order; awaits without blocking the event loop."""
        futures = [asyncio.wrap_future(f) for f in self.submit(values)]
        try:
            async with asyncio.timeout(self.config.timeout_s + _HUNG_S):  # queueing + one model call
                return list(await asyncio.gather(*futures))
        except TimeoutError:
            raise BackendTimeoutError(f"Model '{self.name}' did not answer in time.") from None
        finally:
            for f in futures:
                f.cancel()  # no-op once done; skips the rest of a partly failed request

    def run_sync(self, values: Sequence[In]) -> list[Out]:
        """``run`` for callers on plain threads (never call it on the event loop: it blocks)."""
        return [f.result(timeout=self.config.timeout_s + _HUNG_S) for f in self.submit(values)]

    def queue_depth(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _collect(self, first: _Item[In, Out]) -> tuple[list[_Item[In, Out]], bool]:
        # Wait for company only under load (the last batch had some): a lone caller at
        # concurrency 1 would otherwise pay the whole window for nothing.
        idle = self.config.adaptive_window and self._last_size <= 1
        window = 0.0 if idle else self.config.window_s
        batch, deadline = [first], time.monotonic() + window
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
        for item in batch:
            if not item.future.set_running_or_notify_cancel():
                continue  # the caller gave up (timeout, disconnect): do not compute it
            if start - item.enqueued > self.config.timeout_s:
                self.stats.timed_out += 1
                item.future.set_exception(BackendTimeoutError(f"Model '{self.name}' queue wait exceeded its timeout."))
                continue
            live.append(item)
        if not live:
            return
        try:
            rows = self._run_batch([item.value for item in live])
            if len(rows) != len(live):
                raise RuntimeError(f"model returned {len(rows)} rows for {len(live)} inputs")
        except Exception:
            log.exception("model %s failed on a batch of %d", self.name, len(live))
            self.stats.record_failure(len(live))
            for item in live:
                item.future.set_exception(InternalServerError(f"Model '{self.name}' failed on this input's batch."))
            return
        self.stats.record_batch(len(live), time.monotonic() - start, sum(start - i.enqueued for i in live))
        for item, row in zip(live, rows, strict=True):
            item.future.set_result(row)
