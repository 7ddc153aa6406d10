"""Turn detection: the user's turn ends after ``hang_s`` of silence, optionally confirmed by a model.

Silence is counted in audio time (the durations of the audio frames that pass), not wall
time, so the decision is the same whether audio arrives live or faster than real time.
A new turn that starts while the agent may still be answering is a barge-in: an
``InterruptFrame`` goes out ahead of its ``SpeechStartFrame``.

With a semantic end-of-turn model (``smart_turn``, blink/voice/smart_turn.py), the silence
that reaches the hang is not the end yet: the model is asked, in a thread, whether the turn's
audio sounds finished. "Complete" ends the turn at once; "incomplete" waits up to
``max_extra_s`` more silence (the user may be thinking), then ends it anyway. While the model
runs, the audio behind it is held (so the decision is still made at the hang, in audio time);
system frames pass at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from blink.voice.frames import (
    SAMPLE_RATE,
    AudioInFrame,
    EndFrame,
    Frame,
    InterruptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TurnEndFrame,
)
from blink.voice.smart_turn import DEFAULT_THRESHOLD, WINDOW_SAMPLES, TurnCompletion

log = logging.getLogger("blink.voice")

# 200 ms, on top of the VAD's 64 ms stop confirmation (~260 ms of silence in all): long
# enough to bridge the pauses between words and at commas of fluent speech (typically
# 100-250 ms), short enough to stay inside a 500 ms voice-to-voice budget. The STT final
# decode and the LLM's first tokens run speculatively during this wait, so most of it is
# hidden; a longer pause mid-sentence only costs a discarded speculation.
DEFAULT_HANG_S = 0.2
# After an "incomplete" verdict, the most extra silence before the turn ends anyway. Pipecat
# waits up to 3 s (its STOP_SECS); a wrong "incomplete" then costs 3 s of dead air, so we
# bound it at 1 s: a thinking pause long enough to outlast it loses only the speculative answer.
DEFAULT_MAX_EXTRA_S = 1.0
# Audio kept from before the VAD's speech start (it fires ~64 ms into the first word).
_PREROLL_S = 0.3


@dataclass(slots=True)
class _Verdict:
    """What a model check posts back into the stage's input."""

    check: int
    probability: float | None  # None: the model failed; the silence decides
    elapsed_s: float


class _TurnAudio:
    """The current turn's audio (plus a little before it), at most the model's 8 s window."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._turn_bytes = 0  # bytes of the buffer that belong to the turn (incl. preroll)
        self._cap = WINDOW_SAMPLES * 2

    def start_turn(self) -> None:
        self._turn_bytes = min(len(self._buf), int(_PREROLL_S * SAMPLE_RATE) * 2)

    def add(self, pcm: bytes, in_turn: bool) -> None:
        self._buf += pcm
        if in_turn:
            self._turn_bytes += len(pcm)
        if len(self._buf) > 2 * self._cap:  # trim in big steps, not per frame
            del self._buf[:len(self._buf) - self._cap]

    def snapshot(self) -> np.ndarray:
        n = min(self._turn_bytes, len(self._buf), self._cap)
        pcm = bytes(self._buf[len(self._buf) - n:])
        return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0


class TurnStage:
    def __init__(self, hang_s: float = DEFAULT_HANG_S, smart_turn: TurnCompletion | None = None,
                 threshold: float = DEFAULT_THRESHOLD, max_extra_s: float = DEFAULT_MAX_EXTRA_S) -> None:
        self.hang_s = hang_s
        self.smart_turn = smart_turn
        self.threshold = threshold
        self.max_extra_s = max_extra_s

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        source: asyncio.Queue[Frame | _Verdict | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for f in frames:
                    source.put_nowait(f)
            finally:
                source.put_nowait(None)

        reader = asyncio.ensure_future(read())
        held: deque[Frame] = deque()  # frames that arrived while the model was deciding
        checking: asyncio.Task[None] | None = None
        checks = 0
        upstream_done = False
        in_turn = False  # between the turn's first speech start and its end
        speaking = False
        silence_s = 0.0
        # This pause's verdict: None = not asked yet; else (probability, model seconds).
        verdict: tuple[float | None, float] | None = None
        audio = _TurnAudio()

        async def check(model: TurnCompletion, n: int, clip: np.ndarray) -> None:
            started = time.perf_counter()
            try:
                p: float | None = await asyncio.to_thread(model, clip)
            except Exception as exc:  # a model failure must not end the session: fall back to silence
                log.warning("smart-turn check failed: %s", exc)
                p = None
            source.put_nowait(_Verdict(check=n, probability=p, elapsed_s=time.perf_counter() - started))

        def end_turn() -> TurnEndFrame:
            nonlocal in_turn
            in_turn = False
            if verdict is None:
                return TurnEndFrame(hang_s=silence_s)
            return TurnEndFrame(hang_s=silence_s, smart_turn_probability=verdict[0], smart_turn_s=verdict[1])

        try:
            while True:
                frame: Frame
                if checking is None and held:
                    frame = held.popleft()
                elif upstream_done and checking is None:
                    return
                else:
                    item = await source.get()
                    if item is None:
                        upstream_done = True
                        continue
                    if isinstance(item, _Verdict):
                        if item.check == checks and checking is not None:
                            checking = None
                            verdict = (item.probability, item.elapsed_s)
                            if item.probability is None or item.probability >= self.threshold:
                                yield end_turn()
                        continue
                    if checking is not None:
                        if not item.system:
                            held.append(item)
                            continue
                        if isinstance(item, EndFrame):
                            checking.cancel()
                            checking = None
                    frame = item
                if isinstance(frame, SpeechStartFrame):
                    if not in_turn:
                        yield InterruptFrame(at=frame.at)
                        audio.start_turn()
                    in_turn, speaking = True, True
                elif isinstance(frame, SpeechStopFrame):
                    speaking, silence_s, verdict = False, 0.0, None
                yield frame
                if isinstance(frame, EndFrame):
                    return
                if not isinstance(frame, AudioInFrame):
                    continue
                if self.smart_turn is not None:
                    audio.add(frame.pcm, in_turn)
                if not in_turn or speaking:
                    continue
                silence_s += frame.duration_s
                if silence_s < self.hang_s:
                    continue
                if self.smart_turn is None:
                    yield end_turn()
                elif verdict is None and checking is None:
                    checks += 1
                    checking = asyncio.ensure_future(check(self.smart_turn, checks, audio.snapshot()))
                elif verdict is not None and silence_s >= self.hang_s + self.max_extra_s:
                    yield end_turn()  # "incomplete", but the user has stayed quiet too long
        finally:
            reader.cancel()
            if checking is not None:
                checking.cancel()
            for task in (reader, checking):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
