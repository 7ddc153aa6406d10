"""One dashboard snapshot a second, however many viewers watch.

A snapshot walks the whole 120-s window (percentiles of every second's samples); building one
per viewer per second made the gateway's CPU grow with the number of open dashboards. One
producer task builds it once a tick while anybody watches and keeps the serialized bytes; every
viewer waits for the next tick and sends those same bytes. The producer stops when the last
viewer leaves, and the number of viewers is capped so a crowd cannot hold the loop either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from blink.protocol.errors import OverloadedError

# Viewers refused at the cap retry after a few seconds: EventSource reconnects by itself.
_RETRY_AFTER_S = "5"


class SnapshotFeed:
    def __init__(self, build: Callable[[], bytes], interval_s: float, max_viewers: int) -> None:
        self._build = build
        self.interval_s = interval_s
        self.max_viewers = max_viewers
        self.viewers = 0
        self.builds = 0  # snapshots built so far (what a test counts)
        self._latest = b""
        self._built_at = float("-inf")
        self._seq = 0
        self._tick: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def latest(self) -> bytes:
        """The current snapshot: the shared one if it is from this tick, else a fresh one."""
        if asyncio.get_running_loop().time() - self._built_at >= self.interval_s:
            self._refresh()
        return self._latest

    def join(self) -> None:
        """Count a viewer in (start the producer with the first); ``OverloadedError`` at the cap."""
        if self.viewers >= self.max_viewers:
            raise OverloadedError(f"Too many dashboard viewers (limit {self.max_viewers}); retry shortly.",
                                  headers={"retry-after": _RETRY_AFTER_S})
        self.viewers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._produce())

    def leave(self) -> None:
        self.viewers -= 1

    async def next(self, seen: int) -> tuple[int, bytes]:
        """The first snapshot newer than number ``seen`` (waits for the producer's next tick)."""
        while self._seq <= seen:
            if self._tick is None:
                self._tick = asyncio.Event()
            await self._tick.wait()
        return self._seq, self._latest

    async def _produce(self) -> None:
        while self.viewers > 0:
            self._refresh()
            await asyncio.sleep(self.interval_s)

    def _refresh(self) -> None:
        self._latest = self._build()
        self.builds += 1
        self._built_at = asyncio.get_running_loop().time()
        self._seq += 1
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
