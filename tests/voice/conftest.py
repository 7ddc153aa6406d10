"""Voice fixtures: real Silero VAD, Whisper tiny.en (1 thread, int8), espeak-ng, a tiny embedded LLM."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from blink.backends.embedded import EmbeddedBackend
from blink.engine.config import EngineConfig
from blink.voice.stt import WhisperTranscriber
from blink.voice.tts import EspeakSynthesizer
from blink.voice.vad import SileroVad


@pytest.fixture(scope="session")
def transcriber() -> WhisperTranscriber:
    return WhisperTranscriber(compute_type="int8", threads=1)


@pytest.fixture(scope="session")
def synthesizer() -> EspeakSynthesizer:
    return EspeakSynthesizer()


@pytest.fixture
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="session")
async def tiny_backend(tiny_qwen2: Path) -> AsyncIterator[EmbeddedBackend]:
    """The embedded engine on a tiny random model: real forward passes, gibberish text."""
    backend = EmbeddedBackend("tiny", EngineConfig(model=str(tiny_qwen2), dtype="float32", threads=1,
                                                   max_model_len=2048))  # room for a 400-token answer after any turn
    await backend.start()
    try:
        yield backend
    finally:
        await backend.aclose()
