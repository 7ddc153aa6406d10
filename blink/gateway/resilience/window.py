"""A time-bounded sliding window of samples: what breakers and hedging read.

Running sums make the breaker's checks O(1) per request: the mean (error rate) from ``total``
and "is the p-quantile above T" from ``over`` (how many samples exceed a fixed threshold T):
with nearest rank, the q-quantile of n samples exceeds T exactly when more than n - ceil(q n)
of them do. Sorting (``percentile``) is left to callers that need the value itself (hedging).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable


class SlidingWindow:
    """The last ``max_samples`` values seen within ``horizon_s`` seconds."""

    __slots__ = ("_items", "_horizon", "_max", "_clock", "_threshold", "total", "over")

    def __init__(
        self,
        horizon_s: float,
        max_samples: int,
        clock: Callable[[], float] = time.monotonic,
        threshold: float | None = None,
    ) -> None:
        self._items: deque[tuple[float, float]] = deque()
        self._horizon = horizon_s
        self._max = max_samples
        self._clock = clock
        self._threshold = threshold
        self.total = 0.0
        self.over = 0

    def add(self, value: float) -> None:
        self._items.append((self._clock(), value))
        self.total += value
        if self._threshold is not None and value > self._threshold:
            self.over += 1
        if len(self._items) > self._max:
            self._drop()
        self._expire()

    def values(self) -> list[float]:
        self._expire()
        return [v for _, v in self._items]

    def clear(self) -> None:
        self._items.clear()
        self.total = 0.0
        self.over = 0

    def __len__(self) -> int:
        self._expire()
        return len(self._items)

    def mean(self) -> float | None:
        n = len(self)
        return self.total / n if n else None

    def quantile_over_threshold(self, q: float) -> bool:
        """Whether the ``q``-quantile (nearest rank) of the window exceeds the threshold."""
        n = len(self)
        return n > 0 and self.over > n - math.ceil(q * n)

    def percentile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1, nearest rank) or None when empty."""
        values = sorted(self.values())
        if not values:
            return None
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

    def _drop(self) -> None:
        _, value = self._items.popleft()
        self.total -= value
        if self._threshold is not None and value > self._threshold:
            self.over -= 1

    def _expire(self) -> None:
        cutoff = self._clock() - self._horizon
        items = self._items
        while items and items[0][0] < cutoff:
            self._drop()
