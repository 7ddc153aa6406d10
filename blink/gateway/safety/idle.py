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
# A probe back within this much of its due time found the loop idle: above epoll's own overshoot,
# below one streamed chunk's callbacks (benchmarks/RESULTS.md, "Figures behind the code's numbers", safety).
IDLE_LAG_S = 0.0002


class IdleGate:
    def __init__(self, max_backlog: int, probe_s: float = PROBE_S, idle_lag_s: float = IDLE_LAG_S) -> None:
        self.max_backlog = max_backlog
        self.probe_s = probe_s
        self.idle_lag_s = idle_lag_s
        # Set while someone waits for the backlog to finish (tests, shutdown): no more waiting.
        self.urgent = False
        self.deferrals = 0  # probes that found the loop busy (how often background work gave way)
        self._streak = False  # the last probe found the loop idle and nothing has happened since

    def activity(self) -> None:
        """A response just ended: its client's next request is likely on its way, so the next
        check waits for a full probe instead of running in the gap before that request lands."""
        self._streak = False

    async def idle(self, backlog: int) -> None:
        """Return once the loop is idle, or at once when urgent or ``backlog`` is at its bound."""
        loop = asyncio.get_running_loop()
        if self.urgent or backlog >= self.max_backlog:
            return
        if self._streak:
            # Inside an idle stretch a yield is enough: straight back means nothing was ready
            # and no I/O had arrived, so the backlog drains at full speed.
            start = loop.time()
            await asyncio.sleep(0)
            if loop.time() - start <= self.idle_lag_s:
                return
            self._streak = False
        while not self.urgent and backlog < self.max_backlog:
            due = loop.time() + self.probe_s
            await asyncio.sleep(self.probe_s)
            if loop.time() - due <= self.idle_lag_s:
                self._streak = True
                return
            self.deferrals += 1
