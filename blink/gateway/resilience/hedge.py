"""Hedged first token: a second attempt when the first is slower than the replica's p95 TTFT.

Each hedged attempt runs in a ``Pump`` — a task that owns the backend's iterator and hands its
deltas over through a queue — so the race can wait on two attempts at once without cancelling
either iterator mid-``anext``. The loser's pump is cancelled: its task closes the iterator, which
aborts the generation upstream and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from blink.backends.base import Delta

T = TypeVar("T")

# Deltas a pump may run ahead of its reader: enough to keep a fast stream flowing.
_PUMP_AHEAD = 64


@dataclass(slots=True)
class HedgeConfig:
    enabled: bool = False
    # Hedge at the replica's p95 TTFT (Dean & Barroso, "The Tail at Scale"): ~5% extra load.
    quantile: float = 0.95
    # Never hedge sooner than this, nor before the window holds enough samples to trust its p95.
    min_delay_ms: float = 5.0
    min_samples: int = 20


class _End:
    pass


_END = _End()


class Pump(Generic[T]):
    """Runs ``it`` in its own task; ``tag`` names the replica it came from."""

    def __init__(self, tag: T, it: AsyncIterator[Delta]) -> None:
        self.tag = tag
        self._it = it
        self._queue: asyncio.Queue[Delta | _End | BaseException] = asyncio.Queue(_PUMP_AHEAD)
        self.first = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        first = True
        try:
            async for delta in self._it:
                if first:
                    first = False
                    if not self.first.done():
                        self.first.set_result(None)
                await self._queue.put(delta)
            item: _End | BaseException = _END
        except Exception as exc:
            item = exc
        finally:
            aclose = getattr(self._it, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        if not self.first.done():
            self.first.set_result(None)
        await self._queue.put(item)

    async def get(self) -> Delta:
        """The next delta; raises ``StopAsyncIteration`` at the end or the backend's error."""
        item = await self._queue.get()
        if isinstance(item, _End):
            self._queue.put_nowait(item)
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise item
        return item

    def __aiter__(self) -> Pump[T]:
        return self

    async def __anext__(self) -> Delta:
        return await self.get()

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


async def race(primary: Pump[T], backup: Pump[T] | None, timeout_s: float | None) -> Pump[T] | None:
    """The pump whose first delta (or error) comes first, or None if neither within ``timeout_s``."""
    waits = {primary.first: primary}
    if backup is not None:
        waits[backup.first] = backup
    done, _ = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    if not done:
        return None
    # Prefer the primary on a tie: it was asked first.
    return primary if primary.first in done else waits[next(iter(done))]
