"""One try of one request on one replica: its iterator, timings and its breaker verdict."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from blink.backends.base import Delta, GenerationRequest
from blink.gateway.resilience.hedge import Pump
from blink.gateway.resilience.timeouts import DeadlineExceeded, StallWatch, next_delta
from blink.gateway.router.tier import Replica, Tier
from blink.protocol.errors import BlinkError


class Attempt:
    """Counts in the replica's in-flight load from start to ``close()``; gives the breaker exactly
    one verdict (success, failure) or none (cancelled, escalated, the client's own error)."""

    def __init__(self, tier: Tier, replica: Replica, req: GenerationRequest, pumped: bool = False) -> None:
        self.tier = tier
        self.replica = replica
        it: AsyncIterator[Delta] = replica.backend.stream(req)
        self.pump: Pump[Replica] | None = Pump(replica, it) if pumped else None
        self.it: AsyncIterator[Delta] = self.pump if self.pump is not None else it
        self.t0 = time.perf_counter()
        self._last = self.t0
        self.ttft_ms: float | None = None
        self._itl_sum = 0.0
        self._itl_n = 0
        self.finished = False
        self._verdict = False
        self._closed = False
        self._watch: StallWatch | None = None
        replica.in_flight += 1

    async def first(self, limit_s: float | None, deadline: float | None) -> Delta:
        delta = await next_delta(self.it, limit_s, deadline, first=True)
        now = time.perf_counter()
        self.ttft_ms = (now - self.t0) * 1000.0
        self._last = now
        self.replica.latency.observe(self.ttft_ms)
        self.replica.ttft.add(self.ttft_ms)
        return delta

    async def next(self, stall_s: float | None, deadline: float | None) -> Delta | None:
        """The next delta, or None at the end of the stream; raises on a stall or the deadline."""
        watch = self._watch
        if watch is None:
            watch = self._watch = StallWatch(stall_s, deadline)
        watch.arm()
        try:
            delta = await anext(self.it)
        except StopAsyncIteration:
            self.finished = True
            return None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if watch.fired is not None and task is not None and task.uncancel() == 0:
                raise watch.fired from None
            raise
        finally:
            watch.waiting = False
        now = time.perf_counter()
        if delta.text or delta.token_ids:
            self._itl_sum += (now - self._last) * 1000.0
            self._itl_n += 1
            self._last = now
        return delta

    def succeed(self) -> None:
        if not self._verdict:
            self._verdict = True
            itl = self._itl_sum / self._itl_n if self._itl_n else None
            self.replica.breaker.record_success(self.ttft_ms, itl)

    def fail(self, err: BaseException) -> None:
        """A failure counts against the replica unless it was the request's own fault (4xx)."""
        if self._verdict:
            return
        self._verdict = True
        client_fault = isinstance(err, BlinkError) and 400 <= err.status < 500 and err.status not in (408, 429)
        # The request's own deadline running out says nothing about the replica.
        if client_fault or isinstance(err, DeadlineExceeded):
            self.replica.breaker.release_probe()
        else:
            self.replica.breaker.record_failure(type(err).__name__)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.replica.in_flight -= 1
        if self._watch is not None:
            self._watch.close()
        if not self._verdict:
            self.replica.breaker.release_probe()
        aclose = getattr(self.it, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
