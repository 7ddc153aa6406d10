"""What a voice session is made of: the shared models, and a fresh pipeline per session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from blink.backends.base import StreamSource
from blink.voice.chunker import ClauseChunker
from blink.voice.llm import DEFAULT_SYSTEM_PROMPT, LlmStage
from blink.voice.pipeline import Pipeline
from blink.voice.smart_turn import DEFAULT_THRESHOLD, TurnCompletion
from blink.voice.stt import SttStage, Transcriber
from blink.voice.tts import Synthesizer, TtsStage
from blink.voice.turn import DEFAULT_HANG_S, DEFAULT_MAX_EXTRA_S, TurnStage
from blink.voice.vad import SpeechProbability, VadStage


@dataclass(slots=True)
class VoiceOptions:
    hang_s: float = DEFAULT_HANG_S
    partial_every_s: float = 0.6
    vad_threshold: float = 0.5
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_tokens: int = 128
    temperature: float = 0.7
    speculative_tts: bool = True
    smart_turn_threshold: float = DEFAULT_THRESHOLD
    smart_turn_max_extra_s: float = DEFAULT_MAX_EXTRA_S


@dataclass(slots=True)
class VoiceAgent:
    """Models loaded once (STT, TTS) and shared; the VAD and the conversation are per session."""

    # None when each session brings its own (the gateway path, with the session's API key).
    backend: StreamSource | None
    model: str
    transcriber: Transcriber
    synthesizer: Synthesizer
    vad_factory: Callable[[], SpeechProbability]
    options: VoiceOptions = field(default_factory=VoiceOptions)
    # The semantic end-of-turn model (shared, thread-safe); None: silence alone ends a turn.
    turn_completion: TurnCompletion | None = None

    def pipeline(self, backend: StreamSource | None = None) -> Pipeline:
        """A fresh session; ``backend`` replaces the shared one (the gateway path with the session's key)."""
        o = self.options
        backend = backend or self.backend
        if backend is None:
            raise ValueError("a voice session needs a backend")
        return Pipeline([
            VadStage(self.vad_factory(), threshold=o.vad_threshold),
            TurnStage(hang_s=o.hang_s, smart_turn=self.turn_completion, threshold=o.smart_turn_threshold,
                      max_extra_s=o.smart_turn_max_extra_s),
            SttStage(self.transcriber, partial_every_s=o.partial_every_s),
            LlmStage(backend, self.model, system_prompt=o.system_prompt, max_tokens=o.max_tokens,
                     # hold=False: the TTS holds the answer instead, and speaks it during the hang.
                     temperature=o.temperature, hold=not o.speculative_tts),
            TtsStage(self.synthesizer, ClauseChunker()),
        ])
