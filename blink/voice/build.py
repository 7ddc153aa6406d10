"""Builds the voice sessions from settings: Whisper and the synthesizer loaded once per server, Silero per session."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from blink.backends.base import StreamSource
from blink.config.voice import VoiceSettings
from blink.voice.agent import VoiceAgent, VoiceOptions
from blink.voice.llm import DEFAULT_SYSTEM_PROMPT
from blink.voice.metrics import VoiceMetrics
from blink.voice.smart_turn import SmartTurnModel
from blink.voice.smart_turn_fetch import resolve_smart_turn
from blink.voice.stt import WhisperTranscriber
from blink.voice.tts import EspeakSynthesizer, Synthesizer
from blink.voice.vad import SileroVad
from blink.voice.websocket import SessionGate, VoiceLimits, VoiceSessions


def build_synthesizer(settings: VoiceSettings) -> Synthesizer:
    """The ``voice.tts`` choice; a missing package or voice raises here, at start-up."""
    if settings.tts == "piper":
        # Imported only when chosen: piper-tts is not needed for the espeak-ng default.
        from blink.voice.tts_piper import PiperSynthesizer

        return PiperSynthesizer(settings.tts_piper_voice)
    return EspeakSynthesizer(settings.tts_voice, settings.tts_words_per_minute)


def build_voice_agent(settings: VoiceSettings, backend: StreamSource | None, model: str) -> VoiceAgent:
    SileroVad()  # fail at start-up, not at the first call, when the VAD model or onnxruntime is missing
    return VoiceAgent(
        backend=backend,
        model=model,
        transcriber=WhisperTranscriber(settings.stt_model, compute_type=settings.stt_compute_type,
                                       threads=settings.stt_threads),
        synthesizer=build_synthesizer(settings),
        vad_factory=SileroVad,
        turn_completion=SmartTurnModel(str(resolve_smart_turn(settings.smart_turn))) if settings.smart_turn else None,
        options=VoiceOptions(hang_s=settings.hang_ms / 1000, partial_every_s=settings.stt_partial_every_s,
                             vad_threshold=settings.vad_threshold,
                             system_prompt=settings.system_prompt or DEFAULT_SYSTEM_PROMPT,
                             max_tokens=settings.max_tokens, temperature=settings.temperature,
                             speculative_tts=settings.speculative_tts,
                             smart_turn_threshold=settings.smart_turn_threshold,
                             smart_turn_max_extra_s=settings.smart_turn_max_extra_ms / 1000),
    )


def build_voice_sessions(settings: VoiceSettings, model: str, metrics_registry: CollectorRegistry | None,
                         gate: SessionGate, backend: StreamSource | None = None) -> VoiceSessions:
    """``gate`` gives each session its backend (the gateway path); ``backend`` is for callers without one."""
    limits = VoiceLimits(max_sessions=settings.max_sessions, max_chunk_bytes=settings.max_chunk_bytes,
                         max_session_s=settings.max_session_s)
    agent = build_voice_agent(settings, backend, model)
    return VoiceSessions(agent, limits, VoiceMetrics(metrics_registry), gate)
