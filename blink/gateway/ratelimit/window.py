"""Exact moving-window counting for one gateway process, O(1) amortised per call.

The ``limits`` library stays the engine for shared (Redis) counts; in-process it is replaced
by this because its ``MemoryStorage`` moving window is the gateway's bottleneck: each hit
inserts ``cost`` entries at the front of a list (O(n) per hit, and one entry per token for a
token limit) and starts an expiry task that hops to a thread: a large share of the whole
gateway's CPU per request (benchmarks/RESULTS.md, "Figures behind the code's numbers", ratelimit_window).

Same interface as ``limits.aio.strategies.MovingWindowRateLimiter`` (``test``, ``hit``,
``get_window_stats``), plus synchronous ``*_now`` forms for the admission path (no coroutine per
call), and the same semantics: a window of the item's length ending now holds
at most ``item.amount`` units; ``reset_time`` is when the oldest unit in it leaves.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from limits import RateLimitItem
from limits.util import WindowStats


class _Window:
    __slots__ = ("events", "total")

    def __init__(self) -> None:
        self.events: deque[tuple[float, int]] = deque()  # (time, cost), oldest first
        self.total = 0

    def expire(self, cutoff: float) -> None:
        events = self.events
        while events and events[0][0] <= cutoff:
            self.total -= events.popleft()[1]


class LocalMovingWindow:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def _current(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> tuple[_Window, float]:
        key = item.key_for(*identifiers)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        now = self._clock()
        window.expire(now - item.get_expiry())
        return window, now

    def test_now(self, item: RateLimitItem, identifiers: tuple[str, ...], cost: int = 1) -> bool:
        window, _ = self._current(item, identifiers)
        return window.total + cost <= item.amount

    def hit_now(self, item: RateLimitItem, identifiers: tuple[str, ...], cost: int = 1) -> bool:
        window, now = self._current(item, identifiers)
        if window.total + cost > item.amount:
            return False
        window.events.append((now, cost))
        window.total += cost
        return True

    def stats_now(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> WindowStats:
        window, now = self._current(item, identifiers)
        start = window.events[0][0] if window.events else now
        return WindowStats(start + item.get_expiry(), item.amount - window.total)

    # The ``limits`` strategy interface, for code that may hold either (RateLimiter's remote paths).

    async def test(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.test_now(item, identifiers, cost)

    async def hit(self, item: RateLimitItem, *identifiers: str, cost: int = 1) -> bool:
        return self.hit_now(item, identifiers, cost)

    async def get_window_stats(self, item: RateLimitItem, *identifiers: str) -> WindowStats:
        return self.stats_now(item, identifiers)
