"""Low-priority scheduling on the event loop: wait until the loop has nothing else to do.

asyncio has no task priorities. A timer that fires on time is the signal: the loop was parked in
``epoll`` with no ready callbacks, so no stream is queued behind whatever runs next. A timer
that fires late means other work (tokens, new requests) held the loop, and background work waits
for the next probe. Deferral cannot make work free: past ``max_backlog`` queued jobs the gate
stops waiting, so a saturated gateway still keeps up with its checks instead of growing a queue
without bound.
"""

from __future__ import annotations

import asyncio

# One probe sleeps this long; epoll rounds timeouts up to whole milliseconds, so 1 ms is the
# shortest sleep the selector honours (and ~1,000 cheap wake-ups/s only while work is queued).
PROBE_S = 0.001
# A probe back within this much of its due time found the loop idle: epoll itself overshoots by
# ~0.05-0.1 ms, while one streamed chunk's callbacks take ~0.1 ms or more.
IDLE_LAG_S = 0.0002


class IdleGate:
    def __init__(self, max_backlog: int, probe_s: float = PROBE_S, idle_lag_s: float = IDLE_LAG_S) -> None:
        self.max_backlog = max_backlog
        self.probe_s = probe_s
        self.idle_lag_s = idle_lag_s
        # Set while someone waits for the backlog to finish (tests, shutdown): no more waiting.
        self.urgent = False
        self.deferrals = 0  # probes that found the loop busy (how often background work gave way)

    async def idle(self, backlog: int) -> None:
        """Return once the loop is idle, or at once when urgent or ``backlog`` is at its bound."""
        loop = asyncio.get_running_loop()
        while not self.urgent and backlog < self.max_backlog:
            due = loop.time() + self.probe_s
            await asyncio.sleep(self.probe_s)
            if loop.time() - due <= self.idle_lag_s:
                return
            self.deferrals += 1
