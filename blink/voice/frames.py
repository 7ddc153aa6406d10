"""The frames that flow through a voice pipeline.

Two kinds, as in Pipecat: *system* frames (interrupt, end) overtake queued data and are
handled at once, which is what makes barge-in immediate; *data* frames keep their order and
are dropped from queues when an interrupt passes. Every frame carries ``at``, the
``time.perf_counter()`` at which it was made, so per-turn latencies are read off the frames.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

# 16 kHz mono PCM16 is what Silero VAD and Whisper take, and what the WebSocket carries both ways.
SAMPLE_RATE = 16_000


@dataclass(slots=True)
class Frame:
    system: ClassVar[bool] = False
    # The agent's output (text, audio): dropped from queues when the user interrupts. The
    # user's own audio and speech events are never dropped.
    interruptible: ClassVar[bool] = False
    at: float = field(default_factory=time.perf_counter, kw_only=True)


@dataclass(slots=True)
class AudioInFrame(Frame):
    """Microphone audio: 16 kHz mono PCM16 bytes (any length; the VAD re-frames it)."""

    pcm: bytes

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / SAMPLE_RATE


@dataclass(slots=True)
class SpeechStartFrame(Frame):
    """The VAD heard speech begin (raw, before turn logic)."""


@dataclass(slots=True)
class SpeechStopFrame(Frame):
    """The VAD heard speech end (raw: the user may go on within the turn hang time)."""


@dataclass(slots=True)
class TurnEndFrame(Frame):
    """Silence lasted the hang time: the user's turn is over and the agent may answer."""

    hang_s: float = 0.0
    # Set when the semantic end-of-turn model (blink/voice/smart_turn.py) decided this turn:
    # its probability of "complete" (None if it failed) and its wall time in seconds.
    smart_turn_probability: float | None = None
    smart_turn_s: float | None = None


@dataclass(slots=True)
class PartialTranscriptFrame(Frame):
    """A re-decode of the growing segment; ``committed`` is the prefix two passes agreed on."""

    text: str
    committed: str = ""


@dataclass(slots=True)
class FinalTranscriptFrame(Frame):
    """The transcript of the turn so far, decoded when the speech stopped."""

    text: str
    # Seconds from the raw speech stop to this transcript.
    latency_s: float = 0.0


@dataclass(slots=True)
class TextDeltaFrame(Frame):
    """A piece of the agent's answer; ``ttft_s`` is set on the first piece of a response."""

    interruptible: ClassVar[bool] = True

    text: str
    ttft_s: float | None = None


@dataclass(slots=True)
class TextEndFrame(Frame):
    """The agent's answer is complete (the TTS flushes its last clause)."""

    interruptible: ClassVar[bool] = True


@dataclass(slots=True)
class ErrorFrame(Frame):
    """A stage failed on this turn (a backend error); the session goes on. OpenAI error fields."""

    message: str
    error_type: str = "server_error"
    param: str | None = None
    code: str | None = None


@dataclass(slots=True)
class AudioOutFrame(Frame):
    """Synthesised speech: mono PCM16 bytes at ``sample_rate``."""

    interruptible: ClassVar[bool] = True

    pcm: bytes
    sample_rate: int = SAMPLE_RATE


@dataclass(slots=True)
class InterruptFrame(Frame):
    """The user barged in: cancel generation and drop queued text and audio."""

    system: ClassVar[bool] = True


@dataclass(slots=True)
class EndFrame(Frame):
    """Stop now: every stage cancels its work, forwards this and returns."""

    system: ClassVar[bool] = True
