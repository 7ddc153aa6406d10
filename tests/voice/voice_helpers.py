"""``run_stage``: feed a stage a list of frames and get back what it emits, for sequence asserts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

from blink.voice.frames import Frame
from blink.voice.stage import Stage


async def _source(frames: Iterable[Frame]) -> AsyncIterator[Frame]:
    for frame in frames:
        yield frame


async def run_stage(stage: Stage, frames_in: Iterable[Frame],
                    expected_out: Sequence[type[Frame]] | None = None,
                    ignore: tuple[type[Frame], ...] = ()) -> list[Frame]:
    """Every frame ``stage`` emits for ``frames_in``; if ``expected_out`` is given, the
    types of the emitted frames (less ``ignore``d ones) must be exactly that sequence."""
    out = [f async for f in stage.run(_source(frames_in))]
    if expected_out is not None:
        got = [type(f) for f in out if not isinstance(f, ignore)]
        assert got == list(expected_out), [t.__name__ for t in got]
    return out
