"""The token budget all pre-computation shares: a bucket refilled at ``tokens_per_hour``."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBudget:
    """A job reserves its estimate before it runs and settles the real count after.

    The bucket holds one hour's worth, so an idle night cannot bank a morning's burst beyond it;
    a job that spent more than it reserved leaves the bucket in debt, which delays the next one.
    """

    def __init__(self, tokens_per_hour: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(tokens_per_hour)
        self._rate = tokens_per_hour / 3600.0
        self._clock = clock
        self._level = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self._rate)
        self._at = now

    @property
    def level(self) -> float:
        self._refill()
        return self._level

    def reserve(self, tokens: int) -> bool:
        """Take ``tokens`` if the bucket holds them; False (nothing taken) otherwise."""
        self._refill()
        if tokens > self._level:
            return False
        self._level -= tokens
        return True

    def settle(self, reserved: int, spent: int) -> None:
        """Give back what a job reserved but did not spend (or take what it overspent)."""
        self._refill()
        self._level = min(self.capacity, self._level + reserved - spent)
