"""A chain of stages that is itself a stage.

Each stage runs in its own task and reads from a ``FrameQueue`` fed by the stage before it,
so a slow stage never stalls the one upstream, and an interrupt jumps every queue on its way
down (dropping the data queued behind it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from blink.voice.frames import Frame
from blink.voice.stage import FrameQueue, Stage, pump


class Pipeline:
    def __init__(self, stages: Sequence[Stage]) -> None:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.stages = list(stages)

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        queues = [FrameQueue() for _ in range(len(self.stages) + 1)]
        tasks = [asyncio.ensure_future(pump(frames, queues[0]))]
        for i, stage in enumerate(self.stages):
            tasks.append(asyncio.ensure_future(pump(stage.run(aiter(queues[i])), queues[i + 1])))
        try:
            async for frame in queues[-1]:
                yield frame
            # Surface a stage's exception instead of ending the stream silently.
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
