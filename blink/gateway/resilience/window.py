"""A time-bounded sliding window of samples: what breakers and hedging read percentiles from."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class SlidingWindow:
    """The last ``max_samples`` values seen within ``horizon_s`` seconds.

    Bounded both ways so a quiet backend's old samples expire and a busy one's cost stays O(n)."""

    __slots__ = ("_items", "_horizon", "_clock")

    def __init__(self, horizon_s: float, max_samples: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._items: deque[tuple[float, float]] = deque(maxlen=max_samples)
        self._horizon = horizon_s
        self._clock = clock

    def add(self, value: float) -> None:
        self._items.append((self._clock(), value))

    def values(self) -> list[float]:
        self._expire()
        return [v for _, v in self._items]

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        self._expire()
        return len(self._items)

    def percentile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1, nearest rank) or None when empty."""
        values = sorted(self.values())
        if not values:
            return None
        rank = min(len(values) - 1, max(0, int(q * len(values) + 0.999999) - 1))
        return values[rank]

    def _expire(self) -> None:
        cutoff = self._clock() - self._horizon
        items = self._items
        while items and items[0][0] < cutoff:
            items.popleft()
