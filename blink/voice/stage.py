"""The one stage interface, and the queue that lets system frames overtake data.

A stage is an async generator from frames to frames. Stages that do slow work (an LLM
stream, speech synthesis) run it as a background task that posts into a ``FrameQueue``
shared with the stage's input, so an interrupt is seen while the work is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from blink.voice.frames import Frame, InterruptFrame


class Stage(Protocol):
    """Frames in, frames out. A pipeline is itself a stage, so pipelines nest."""

    def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]: ...


class FrameQueue:
    """A FIFO of data frames with a priority lane for system frames.

    ``put`` of an interrupt drops the queued agent output (``interruptible`` frames): text
    and audio made for an answer the user just talked over must never reach the speaker. ``close`` ends the
    iteration once what is queued has been read.
    """

    def __init__(self) -> None:
        self._system: deque[Frame] = deque()
        self._data: deque[Frame] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    def put(self, frame: Frame) -> None:
        if frame.system:
            if isinstance(frame, InterruptFrame):
                self._data = deque(f for f in self._data if not f.interruptible)
            self._system.append(frame)
        else:
            self._data.append(frame)
        self._ready.set()

    def has_data(self) -> bool:
        return bool(self._data)

    def pop_data(self) -> Frame:
        return self._data.popleft()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def get(self) -> Frame | None:
        """The next frame, system frames first; None once closed and drained."""
        while True:
            if self._system:
                return self._system.popleft()
            if self._data:
                return self._data.popleft()
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()

    async def __aiter__(self) -> AsyncIterator[Frame]:
        while (frame := await self.get()) is not None:
            yield frame


async def pump(frames: AsyncIterator[Frame], queue: FrameQueue) -> None:
    """Copy ``frames`` into ``queue`` and close it at the end (run as a task)."""
    try:
        async for frame in frames:
            queue.put(frame)
    finally:
        queue.close()


class Inbox:
    """One queue for a stage's upstream frames and for what its background work posts.

    Work posts are tagged with a generation number; ``cancel`` bumps it, so frames posted by
    cancelled work are discarded instead of reaching downstream.
    """

    def __init__(self, frames: AsyncIterator[Frame]) -> None:
        self._queue = FrameQueue()
        self._upstream_open = True
        self._generation = 0
        self._reader = asyncio.ensure_future(self._read(frames))

    async def _read(self, frames: AsyncIterator[Frame]) -> None:
        try:
            async for frame in frames:
                self._queue.put(frame)
        finally:
            self._upstream_open = False
            self._queue.put(_UpstreamEnded())

    @property
    def generation(self) -> int:
        return self._generation

    def post(self, generation: int, frame: Frame) -> None:
        """Called by background work: ``frame`` goes downstream unless that work was cancelled."""
        if generation == self._generation:
            self._queue.put(_Posted(frame=frame, generation=generation))

    def cancel_work(self) -> int:
        """Invalidate what the current work posted or will post; returns the new generation."""
        self._generation += 1
        return self._generation

    async def get(self) -> tuple[Frame | None, bool]:
        """``(frame, from_upstream)``; ``(None, True)`` once upstream has ended."""
        while True:
            item = await self._queue.get()
            if item is None or isinstance(item, _UpstreamEnded):
                return None, True
            if isinstance(item, _Posted):
                if item.generation == self._generation:
                    return item.frame, False
                continue
            return item, True

    def drain_posts(self) -> list[Frame]:
        """Frames the current work posted that are still queued (after upstream ended)."""
        out: list[Frame] = []
        while self._queue.has_data():
            item = self._queue.pop_data()
            if isinstance(item, _Posted) and item.generation == self._generation:
                out.append(item.frame)
        return out

    async def aclose(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


class _UpstreamEnded(Frame):
    """Marker: the stage's input iterator is exhausted."""


class _Posted(Frame):
    """Wraps a frame posted by background work, with the work's generation."""

    interruptible = True

    __slots__ = ("frame", "generation")

    def __init__(self, frame: Frame, generation: int) -> None:
        self.frame = frame
        self.generation = generation
        self.at = frame.at
