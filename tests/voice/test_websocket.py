"""/v1/voice end to end: a real `blink serve` app on 127.0.0.1 (tiny embedded LLM, Whisper tiny.en,
Silero, espeak-ng), a real WebSocket client, espeak-ng speech sent in 40 ms chunks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from live_server import LiveServer
from typer.testing import CliRunner
from voice_audio import silence, speak
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from blink.backends.base import Backend
from blink.cli.main import app as cli_app
from blink.config.gateway import AuthSettings
from blink.config.models import EmbeddedModel, OpenAIHTTPModel
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

MODEL = "tiny"
# 40 ms of 16 kHz PCM16: a typical microphone chunk.
CHUNK = 1280
# Chunks go out 4x faster than real time: live-like pacing without making the test slow.
CHUNK_GAP_S = 0.01
# The test server's audio message limit (the default is 64 KiB): small, so the test sends little.
MAX_CHUNK = 4096


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[str, Backend]]:
    settings = Settings(
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=512)],
        # A long greedy answer: the random model is still talking when the barge-in test cuts in.
        # Streaming partial transcripts stay on (every 0.6 s of speech), as deployed.
        voice={"enabled": True, "max_tokens": 300, "temperature": 0.0, "max_chunk_bytes": MAX_CHUNK},
    )
    app = build_app(settings)
    with LiveServer(app) as server:
        yield f"ws://127.0.0.1:{server.port}/v1/voice", app.state.registry.resolve(MODEL)


async def _send_audio(ws: ClientConnection, pcm: bytes, stop: asyncio.Event | None = None) -> None:
    for i in range(0, len(pcm), CHUNK):
        if stop is not None and stop.is_set():
            return
        await ws.send(pcm[i:i + CHUNK])
        await asyncio.sleep(CHUNK_GAP_S)


class Inbox:
    """Everything the server sends, in order, read by a background task."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.items: list[dict[str, Any] | bytes] = []
        self.changed = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                self.items.append(msg if isinstance(msg, bytes) else json.loads(msg))
                self.changed.set()
        except ConnectionClosed:
            pass
        self.changed.set()

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.items if isinstance(m, dict) and m["type"] == kind]

    async def wait_for(self, ok: Any, timeout: float = 60) -> None:
        async def loop() -> None:
            while not ok():
                if self.task.done():
                    raise AssertionError(f"socket closed first: {self.summary()}")
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(loop(), timeout)

    def summary(self) -> list[str]:
        return [f"<{len(m)} bytes>" if isinstance(m, bytes) else m["type"] for m in self.items]


async def test_a_spoken_question_gets_a_transcript_text_and_audio(served: tuple[str, Backend]) -> None:
    url, _ = served
    async with connect(url, max_size=2**20) as ws:
        inbox = Inbox(ws)
        await ws.send(json.dumps({"type": "session.configure", "format": "pcm16", "sample_rate": 16000}))
        await _send_audio(ws, silence(0.3) + speak("How many apples are left in the basket?") + silence(0.6))
        await inbox.wait_for(lambda: inbox.events("turn.metrics"))
        await ws.send(json.dumps({"type": "input.end"}))  # finish the answer, then close
        await asyncio.wait_for(inbox.task, 60)
    assert ws.close_code == 1000
    kinds = inbox.summary()
    assert kinds[0] == "session.created"
    assert inbox.events("transcript.partial")  # 2.7 s of speech: re-decoded while it was spoken
    finals = inbox.events("transcript.final")
    assert finals and "apples" in finals[-1]["text"].lower()
    order = [kinds.index(k) for k in ("speech.started", "speech.stopped", "turn.ended", "response.text.delta")]
    assert order == sorted(order)
    first_audio = next(i for i, m in enumerate(inbox.items) if isinstance(m, bytes))
    assert first_audio > kinds.index("response.text.delta") and kinds[-1] == "response.done"
    audio = b"".join(m for m in inbox.items if isinstance(m, bytes))
    assert len(audio) % 2 == 0 and len(audio) / 32_000 > 0.5  # PCM16 at 16 kHz: over half a second of speech
    metrics = inbox.events("turn.metrics")[0]
    assert 0 < metrics["voice_to_voice_s"] and metrics["first_clause_s"] <= metrics["voice_to_voice_s"]
    # The same turn is on /metrics as per-stage histograms.
    async with httpx.AsyncClient() as http:
        scrape = (await http.get(url.replace("ws://", "http://").replace("/v1/voice", "/metrics"))).text
    counts = {stage: _sample(scrape, f'blink_voice_stage_seconds_count{{stage="{stage}"}}')
              for stage in ("voice_to_voice", "stt_final", "llm_ttft", "tts_first_audio")}
    assert all(count >= 1 for count in counts.values()), counts


def _sample(scrape: str, series: str) -> float:
    """The value of one Prometheus sample line (0 when the series is absent)."""
    for line in scrape.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_barge_in_stops_audio_and_frees_the_generation(served: tuple[str, Backend]) -> None:
    url, backend = served
    async with connect(url, max_size=2**20) as ws:
        inbox = Inbox(ws)
        await _send_audio(ws, silence(0.3) + speak("The children are playing in the garden.") + silence(0.5))
        await inbox.wait_for(lambda: any(isinstance(m, bytes) for m in inbox.items))
        assert backend.load().running == 1  # the answer is still being generated

        def interrupted_after_audio() -> bool:
            kinds = inbox.summary()
            return "response.interrupted" in kinds[next(i for i, k in enumerate(kinds) if k.startswith("<")):]

        # The user talks over the agent; the audio stops once the server says it was interrupted,
        # so the VAD never hears this speech end and no new answer starts.
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(inbox.wait_for(interrupted_after_audio))
        watcher.add_done_callback(lambda _: stop.set())
        await _send_audio(ws, speak("Stop, wait a moment, I have another question for you."), stop)
        await asyncio.wait_for(watcher, 30)
        cut = max(i for i, m in enumerate(inbox.items) if isinstance(m, dict) and m["type"] == "response.interrupted")
        await asyncio.sleep(0.3)  # anything the server still had queued would arrive by now
        after = inbox.items[cut + 1:]
        # Not one audio frame (40 ms) or text delta of the old answer follows the interrupt.
        assert not [m for m in after if isinstance(m, bytes) or m["type"] == "response.text.delta"], after

        # The engine aborted the request: fresh stats (after a one-token request) show nothing
        # running or waiting and every KV block free, while the voice session is still open.
        client = openai.AsyncOpenAI(base_url=url.replace("ws://", "http://").removesuffix("/voice"), api_key="-",
                                    max_retries=0, timeout=30)
        await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "ok"}], max_tokens=1)
        load = backend.load()
        assert (load.running, load.waiting, load.kv_usage) == (0, 0, 0.0)
        await ws.send(json.dumps({"type": "session.close"}))
        await asyncio.wait_for(inbox.task, 30)
    assert ws.close_code == 1000


async def _refused(url: str, *messages: str | bytes) -> tuple[int | None, list[dict[str, Any] | bytes]]:
    async with connect(url, max_size=2**20) as ws:
        inbox = Inbox(ws)
        for m in messages:
            await ws.send(m)
        await asyncio.wait_for(inbox.task, 30)  # the server closes: never a hang
    return ws.close_code, inbox.items


@pytest.mark.parametrize(("messages", "close_code", "param", "code"), [
    ([json.dumps({"type": "session.configure", "format": "f32", "sample_rate": 44100})], 1003, "format",
     "unsupported_audio_format"),
    ([bytes(1001)], 1003, "audio", "unsupported_audio_format"),  # odd length: not 16-bit samples
    ([bytes(MAX_CHUNK + 2)], 1009, "audio", "message_too_big"),
    (["hello {not json"], 1007, "type", None),
    # json.loads raises RecursionError (a RuntimeError), which closed the socket as normal (1000), silently.
    (["[" * 100_000 + "]" * 100_000], 1007, "type", None),
])
async def test_bad_input_gets_an_error_event_and_a_close_code(
        served: tuple[str, Backend], messages: list[str | bytes], close_code: int, param: str,
        code: str | None) -> None:
    got_code, items = await _refused(served[0], *messages)
    assert got_code == close_code
    error = next(m for m in items if isinstance(m, dict) and m["type"] == "error")["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert error["message"]


async def test_an_unknown_message_type_is_reported_and_the_session_goes_on(served: tuple[str, Backend]) -> None:
    code, items = await _refused(served[0], json.dumps({"type": "response.create"}), bytes(CHUNK),
                                 json.dumps({"type": "input.end"}))
    assert code == 1000
    assert [m["error"]["param"] for m in items if isinstance(m, dict) and m["type"] == "error"] == ["type"]


@pytest.mark.parametrize(("voice", "close_code", "error_type"), [
    ({}, 1008, "invalid_request_error"),  # voice is off by default
    # On, but its models cannot load (here: a Whisper folder that does not exist).
    ({"enabled": True, "stt_model": "/nonexistent/whisper"}, 1011, "server_error"),
])
async def test_voice_off_or_unavailable_says_why_and_closes(
        voice: dict[str, Any], close_code: int, error_type: str) -> None:
    settings = Settings(models=[OpenAIHTTPModel(name="up", kind="openai_http", base_url="http://127.0.0.1:9/v1")],
                        voice=voice)
    with LiveServer(build_app(settings)) as server:
        code, items = await _refused(f"ws://127.0.0.1:{server.port}/v1/voice")
    assert code == close_code
    assert [m["error"]["type"] for m in items if isinstance(m, dict)] == [error_type]


def test_blink_voice_plays_a_wav_file_and_prints_transcript_and_timings(
        served: tuple[str, Backend], tmp_path: Path) -> None:
    # espeak-ng's own 22.05 kHz WAV: the command resamples it to 16 kHz before sending.
    wav = tmp_path / "question.wav"
    wav.write_bytes(subprocess.run(["espeak-ng", "-w", "/dev/stdout", "-v", "en-us", "-s", "150", "--",
                                    "How many apples are left in the basket?"],
                                   capture_output=True, check=True, timeout=30).stdout)
    out = tmp_path / "answer.wav"
    result = CliRunner().invoke(cli_app, ["voice", str(wav), "--url", served[0], "--out", str(out), "--speed", "4"])
    assert result.exit_code == 0, result.output
    assert "apples" in result.output.lower() and "timings: vad_hang" in result.output
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels()) == (16_000, 1) and w.getnframes() > 8_000


async def test_api_keys_and_session_limits_guard_the_voice_socket(tmp_path: Path) -> None:
    keys_db = tmp_path / "keys.db"
    store = ApiKeyStore(keys_db)
    _, secret = store.create("acme", max_voice_sessions=1)
    _, other = store.create("acme")  # the server default: 2 sessions per key
    settings = Settings(models=[OpenAIHTTPModel(name="up", kind="openai_http", base_url="http://127.0.0.1:9/v1")],
                        auth=AuthSettings(enabled=True, keys_db=str(keys_db)),
                        voice={"enabled": True, "max_sessions": 2, "max_session_s": 2})
    with LiveServer(build_app(settings)) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/voice"
        for headers, code in [({}, "missing_api_key"), ({"authorization": "Bearer wrong"}, "invalid_api_key")]:
            close, items = await _refused_with(url, headers)
            assert close == 1008
            assert [(m["error"]["type"], m["error"]["code"]) for m in items if isinstance(m, dict)] == [
                ("authentication_error", code)]
        async with connect(url, additional_headers={"x-api-key": secret}) as ws:
            inbox = Inbox(ws)
            await inbox.wait_for(lambda: inbox.events("session.created"), 30)
            # The key's own share (1): its second session is told to come back later (one key
            # could hold every slot for max_session_s)...
            close, items = await _refused_with(url, {"x-api-key": secret})
            assert close == 1013
            assert [(m["error"]["type"], m["error"]["code"]) for m in items if isinstance(m, dict)] == [
                ("rate_limit_error", "too_many_sessions")]
            # ...while another key still gets one; then every slot (2) is taken, whoever asks.
            async with connect(url, additional_headers={"x-api-key": other}) as ws2:
                inbox2 = Inbox(ws2)
                await inbox2.wait_for(lambda: inbox2.events("session.created"), 30)
                close, items = await _refused_with(url, {"x-api-key": other})
                assert close == 1013
                assert [m["error"]["code"] for m in items if isinstance(m, dict)] == ["too_many_sessions"]
                # The session time limit (2 s here) closes even an idle session.
                await asyncio.wait_for(inbox.task, 30)
                await asyncio.wait_for(inbox2.task, 30)
        assert ws.close_code == 1000
        # Its session closed: the key's slot is free again (the refusal above took none).
        async with connect(url, additional_headers={"x-api-key": secret}) as ws:
            inbox = Inbox(ws)
            await inbox.wait_for(lambda: inbox.events("session.created"), 30)
            await ws.send(json.dumps({"type": "session.close"}))
            await asyncio.wait_for(inbox.task, 30)
        assert ws.close_code == 1000


async def _refused_with(url: str, headers: dict[str, str]) -> tuple[int | None, list[dict[str, Any] | bytes]]:
    async with connect(url, additional_headers=headers) as ws:
        inbox = Inbox(ws)
        await asyncio.wait_for(inbox.task, 30)
    return ws.close_code, inbox.items
