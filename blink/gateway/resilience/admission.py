"""Admission control for one tier: a concurrency cap, a bounded priority queue, fast rejection.

A request is admitted at once when a slot is free, else queued — unless the queue is full or
its predicted TTFT (wait = position x mean service time / slots, plus the tier's recent TTFT)
passes the request's budget, in which
case ``try_enter`` says no at once (the caller degrades to another tier or answers 503 +
retry-after). ``voice`` requests queue ahead of ``interactive`` (chat UIs) ahead of ``normal``
ahead of ``batch``; ``batch`` may use only half the queue so a backlog of bulk work never fills it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass

_LANES = ("voice", "interactive", "normal", "batch", "idle")
# EWMA weight of the newest service time (about the last ten requests).
_ALPHA = 0.1


@dataclass(slots=True)
class AdmissionConfig:
    # Requests a tier serves at once; 0 = unlimited (no admission control for this tier).
    max_concurrency: int = 0
    # Requests waiting for a slot before new ones are shed.
    max_queue: int = 64


class Ticket:
    """A held slot; ``release()`` exactly once (idempotent)."""

    __slots__ = ("_owner", "_released")

    def __init__(self, owner: AdmissionController) -> None:
        self._owner = owner
        self._released = False

    def release(self, service_ms: float | None = None) -> None:
        if not self._released:
            self._released = True
            self._owner._release(service_ms)


class AdmissionController:
    def __init__(self, name: str, config: AdmissionConfig | None = None) -> None:
        self.name = name
        self.config = config or AdmissionConfig()
        self.in_flight = 0
        self._lanes: dict[str, deque[asyncio.Future[Ticket]]] = {lane: deque() for lane in _LANES}
        self.service_ms_ewma: float | None = None
        self.rejected = 0
        # Per lane, for metrics: requests that waited in the queue and their summed wait (s).
        self.waited = dict.fromkeys(_LANES, 0)
        self.wait_s = dict.fromkeys(_LANES, 0.0)
        self._enqueued_at: dict[asyncio.Future[Ticket], float] = {}

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._lanes.values())

    def queued_by_lane(self) -> dict[str, int]:
        return {lane: len(q) for lane, q in self._lanes.items()}

    def predicted_wait_ms(self, priority: str = "normal") -> float:
        """How long a request of ``priority`` arriving now would wait for a slot."""
        cap = self.config.max_concurrency
        if cap <= 0 or self.in_flight < cap:
            return 0.0
        ahead = 0
        for lane in _LANES:
            ahead += len(self._lanes[lane])
            if lane == priority:
                break
        return (ahead + 1) * (self.service_ms_ewma or 0.0) / cap

    def retry_after_s(self) -> int:
        """A retry-after hint: about when a queued request now would get its slot."""
        return max(1, math.ceil(self.predicted_wait_ms("batch") / 1000.0))

    def try_enter(
        self, priority: str | None, budget_ms: float | None, ttft_ms: float | None = None
    ) -> asyncio.Future[Ticket] | None:
        """A future resolving to a ticket, or None at once when the request must be shed.

        ``budget_ms`` bounds the time to the first token, so the predicted wait plus the tier's
        own TTFT (``ttft_ms``, recent EWMA) must fit in it."""
        lane = priority if priority in _LANES else "normal"
        cap = self.config.max_concurrency
        fut: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        if cap <= 0 or (self.in_flight < cap and self.queued == 0):
            self.in_flight += 1
            fut.set_result(Ticket(self))
            return fut
        limit = self.config.max_queue // 2 if lane in ("batch", "idle") else self.config.max_queue
        if self.queued >= limit or (
            budget_ms is not None and self.predicted_wait_ms(lane) + (ttft_ms or 0.0) > budget_ms
        ):
            self.rejected += 1
            return None
        self._lanes[lane].append(fut)
        self._enqueued_at[fut] = time.monotonic()
        return fut

    def _release(self, service_ms: float | None) -> None:
        if service_ms is not None:
            prev = self.service_ms_ewma
            self.service_ms_ewma = service_ms if prev is None else prev + _ALPHA * (service_ms - prev)
        for lane in _LANES:
            queue = self._lanes[lane]
            while queue:
                fut = queue.popleft()
                since = self._enqueued_at.pop(fut, None)
                if not fut.done():  # a waiter that gave up (cancelled) is skipped
                    fut.set_result(Ticket(self))
                    if since is not None:
                        self.waited[lane] += 1
                        self.wait_s[lane] += time.monotonic() - since
                    return
        self.in_flight -= 1

    def abandon(self, fut: asyncio.Future[Ticket]) -> None:
        """A queued request gave up (deadline, disconnect): drop it, or hand back its slot."""
        if fut.done() and not fut.cancelled():
            fut.result().release()
            return
        fut.cancel()
        self._enqueued_at.pop(fut, None)
        for queue in self._lanes.values():
            if fut in queue:
                queue.remove(fut)
                return
