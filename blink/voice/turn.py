"""Turn detection: the user's turn ends after ``hang_s`` of silence.

Silence is counted in audio time (the durations of the audio frames that pass), not wall
time, so the decision is the same whether audio arrives live or faster than real time.
A new turn that starts while the agent may still be answering is a barge-in: an
``InterruptFrame`` goes out ahead of its ``SpeechStartFrame``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from blink.voice.frames import (
    AudioInFrame,
    EndFrame,
    Frame,
    InterruptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TurnEndFrame,
)

# 200 ms, on top of the VAD's 64 ms stop confirmation (~260 ms of silence in all): long
# enough to bridge the pauses between words and at commas of fluent speech (typically
# 100-250 ms), short enough to stay inside a 500 ms voice-to-voice budget. The STT final
# decode and the LLM's first tokens run speculatively during this wait, so most of it is
# hidden; a longer pause mid-sentence only costs a discarded speculation.
DEFAULT_HANG_S = 0.2


class TurnStage:
    def __init__(self, hang_s: float = DEFAULT_HANG_S) -> None:
        self.hang_s = hang_s

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        in_turn = False  # between the turn's first speech start and its end
        speaking = False
        silence_s = 0.0
        async for frame in frames:
            if isinstance(frame, SpeechStartFrame):
                if not in_turn:
                    yield InterruptFrame(at=frame.at)
                in_turn, speaking = True, True
            elif isinstance(frame, SpeechStopFrame):
                speaking, silence_s = False, 0.0
            yield frame
            if isinstance(frame, EndFrame):
                return
            if isinstance(frame, AudioInFrame) and in_turn and not speaking:
                silence_s += frame.duration_s
                if silence_s >= self.hang_s:
                    in_turn = False
                    yield TurnEndFrame(hang_s=silence_s)
