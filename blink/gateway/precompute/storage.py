"""The storage bound on predicted entries: how many are live in the cache at once."""

from __future__ import annotations

import heapq


class LiveEntries:
    """Expiry times of the entries written; past ``limit`` live ones, no new one is admitted.

    The cache store has no delete, so the bound is kept by not writing: a predicted entry lives
    out its TTL (or is evicted by the store's own LRU) and frees its slot then.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._expiries: list[float] = []

    def live(self, now: float) -> int:
        while self._expiries and self._expiries[0] <= now:
            heapq.heappop(self._expiries)
        return len(self._expiries)

    def admit(self, now: float, expires_at: float) -> bool:
        if self.live(now) >= self.limit:
            return False
        heapq.heappush(self._expiries, expires_at)
        return True
