"""``/v1/voice``: one WebSocket per conversation, 16 kHz mono PCM16 audio both ways, JSON events.

Client -> server
  * binary messages: mono PCM16 little-endian at 16 kHz, any length up to ``max_chunk_bytes``
    (20-100 ms chunks, sent as the microphone produces them);
  * ``{"type": "session.configure", "format": "pcm16", "sample_rate": 16000}`` (optional): any
    other format or rate is refused (``unsupported_audio_format``, close 1003);
  * ``{"type": "input.end"}``: no more audio; the answer in progress is finished, then the server closes (1000);
  * ``{"type": "session.close"}``: stop now (1000).

Server -> client
  * ``session.created`` {session, format, sample_rate, channels};
  * ``speech.started`` / ``speech.stopped`` (raw VAD), ``turn.ended`` (the silence lasted the hang time);
  * ``transcript.partial`` {text, committed} while the user speaks, ``transcript.final`` {text};
  * ``response.text.delta`` {text}, then binary messages of the spoken answer (PCM16, 16 kHz, 40 ms
    each), then ``response.done``;
  * ``response.interrupted``: the user barged in; drop whatever audio is buffered for playback;
  * ``turn.metrics`` {vad_hang_s, stt_final_s, llm_ttft_s, first_clause_s, tts_first_audio_s, voice_to_voice_s};
  * ``error`` {error: {message, type, param, code}} (OpenAI's shape). A backend error ends that
    answer only; bad input closes the socket: 1003 wrong sample format (an odd-length chunk or a
    refused ``session.configure``), 1007 a text message that is not a JSON object, 1009 a chunk
    over the limit, 1008 refused (no valid API key), 1013 too many sessions (the server's, or the
    API key's own share), 1011 a server fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from blink.backends.base import StreamSource
from blink.protocol.errors import BlinkError
from blink.voice.agent import VoiceAgent
from blink.voice.frames import (
    SAMPLE_RATE,
    AudioInFrame,
    AudioOutFrame,
    EndFrame,
    ErrorFrame,
    FinalTranscriptFrame,
    Frame,
    InterruptFrame,
    PartialTranscriptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TextDeltaFrame,
    TextEndFrame,
    TurnEndFrame,
)
from blink.voice.metrics import TurnClock, VoiceMetrics

log = logging.getLogger("blink.voice")

# Close codes (RFC 6455 section 7.4.1).
CLOSE_NORMAL = 1000
CLOSE_UNSUPPORTED = 1003  # data of a type it cannot accept (the audio format)
CLOSE_INVALID_PAYLOAD = 1007  # a text message that is not a JSON object
CLOSE_POLICY = 1008  # refused: no valid API key, or voice is off on this server
CLOSE_TOO_BIG = 1009
CLOSE_SERVER_ERROR = 1011
CLOSE_TRY_LATER = 1013


@dataclass(slots=True)
class VoiceLimits:
    max_sessions: int = 8
    max_chunk_bytes: int = 65_536
    max_session_s: float = 1800.0


class SessionGate(Protocol):
    """Admits a session and gives the backend its turns go through (raises ``BlinkError`` to refuse:
    a 429 is "busy", 1013, anything else 1008)."""

    async def open(self, ws: WebSocket) -> StreamSource: ...

    def close(self, ws: WebSocket) -> None:
        """The session ``open`` admitted on ``ws`` ended, however it ended: give back what it held."""


class _Refused(Exception):
    """Bad input: send ``body`` as an error event, then close with ``code``."""

    def __init__(self, code: int, message: str, error_type: str = "invalid_request_error",
                 param: str | None = None, error_code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.body = error_event(message, error_type, param, error_code)


def error_event(message: str, error_type: str = "invalid_request_error", param: str | None = None,
                code: str | None = None) -> dict[str, Any]:
    return {"type": "error", "error": {"message": message, "type": error_type, "param": param, "code": code}}


async def refuse(ws: WebSocket, close_code: int, body: dict[str, Any]) -> None:
    """Accept (so the client can read why), send one error event, close."""
    await ws.accept()
    await ws.send_json(body)
    await ws.close(close_code)


def _event(frame: Frame) -> dict[str, Any] | None:
    match frame:
        case SpeechStartFrame():
            return {"type": "speech.started"}
        case SpeechStopFrame():
            return {"type": "speech.stopped"}
        case PartialTranscriptFrame(text=text, committed=committed):
            return {"type": "transcript.partial", "text": text, "committed": committed}
        case FinalTranscriptFrame(text=text):
            return {"type": "transcript.final", "text": text}
        case TurnEndFrame():
            return {"type": "turn.ended"}
        case TextDeltaFrame(text=text):
            return {"type": "response.text.delta", "text": text}
        case TextEndFrame():
            return {"type": "response.done"}
        case InterruptFrame():
            return {"type": "response.interrupted"}
        case ErrorFrame(message=message, error_type=error_type, param=param, code=code):
            return error_event(message, error_type, param, code)
    return None


class VoiceSessions:
    """Runs each WebSocket as one pipeline session, within ``limits``."""

    def __init__(self, agent: VoiceAgent, limits: VoiceLimits, metrics: VoiceMetrics | None = None,
                 gate: SessionGate | None = None) -> None:
        self.agent = agent
        self.limits = limits
        self.metrics = metrics
        self.gate = gate
        self.active = 0

    async def serve(self, ws: WebSocket) -> None:
        backend: StreamSource | None = None
        if self.gate is not None:
            try:
                backend = await self.gate.open(ws)
            except BlinkError as exc:
                body = exc.body()["error"]
                await refuse(ws, CLOSE_TRY_LATER if exc.status == 429 else CLOSE_POLICY,
                             error_event(body["message"], body["type"], body["param"], body["code"]))
                return
        try:
            if self.active >= self.limits.max_sessions:
                await refuse(ws, CLOSE_TRY_LATER, error_event(
                    f"Too many voice sessions (limit {self.limits.max_sessions}); retry later.",
                    "rate_limit_exceeded", code="too_many_sessions"))
                return
            self.active += 1
            try:
                await ws.accept()
                await _Session(ws, self, backend).run()
            finally:
                self.active -= 1
        finally:
            if self.gate is not None:
                self.gate.close(ws)


class _Session:
    def __init__(self, ws: WebSocket, owner: VoiceSessions, backend: StreamSource | None) -> None:
        self.ws = ws
        self.owner = owner
        self.limits = owner.limits
        self.id = f"voice-{uuid.uuid4().hex[:12]}"
        self.pipeline = owner.agent.pipeline(backend)
        self.audio_in: asyncio.Queue[Frame | None] = asyncio.Queue()
        # Events and audio go out from two tasks (the pipeline's output, refusals from the reader).
        self._send_lock = asyncio.Lock()

    async def _send(self, message: dict[str, Any] | bytes) -> None:
        async with self._send_lock:
            if isinstance(message, bytes):
                await self.ws.send_bytes(message)
            else:
                await self.ws.send_text(json.dumps(message))

    async def run(self) -> None:
        await self._send({"type": "session.created", "session": self.id, "format": "pcm16",
                          "sample_rate": SAMPLE_RATE, "channels": 1})
        sender = asyncio.ensure_future(self._forward())
        receiver = asyncio.ensure_future(self._receive())
        close_code, reason = CLOSE_NORMAL, None
        try:
            done, _ = await asyncio.wait({sender, receiver}, timeout=self.limits.max_session_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if receiver in done and receiver.result() == "input.end":
                done, _ = await asyncio.wait({sender}, timeout=self.limits.max_session_s)
            refused = receiver.result() if receiver in done else None
            if isinstance(refused, _Refused):
                close_code = refused.code
                await self._send(refused.body)
            elif sender in done and sender.exception() is not None:
                exc = sender.exception()
                if not isinstance(exc, WebSocketDisconnect):
                    log.exception("voice session %s failed", self.id, exc_info=exc)
                    close_code = CLOSE_SERVER_ERROR
                    await self._send(error_event("The voice pipeline failed; the session is closed.",
                                                 "server_error"))
            elif not done:
                close_code, reason = CLOSE_NORMAL, "session time limit"
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client went away while we were telling it why
        finally:
            for task in (receiver, sender):  # cancelling the pipeline closes the LLM stream
                task.cancel()
            for task in (receiver, sender):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.ws.application_state != WebSocketState.DISCONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close(close_code, reason)

    async def _source(self) -> AsyncIterator[Frame]:
        while (frame := await self.audio_in.get()) is not None:
            yield frame

    async def _receive(self) -> str | _Refused:
        """Feeds the pipeline until the client ends: "input.end", "close", or a refusal."""
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return "close"
                if (pcm := msg.get("bytes")) is not None:
                    self.audio_in.put_nowait(AudioInFrame(pcm=self._check_audio(pcm)))
                    continue
                kind = self._control(msg.get("text") or "")
                if kind == "input.end":
                    self.audio_in.put_nowait(None)
                    return kind
                if kind == "session.close":
                    self.audio_in.put_nowait(EndFrame())
                    self.audio_in.put_nowait(None)
                    return "close"
        except _Refused as refused:
            self.audio_in.put_nowait(EndFrame())
            self.audio_in.put_nowait(None)
            return refused
        except WebSocketDisconnect:
            return "close"

    def _check_audio(self, pcm: bytes) -> bytes:
        if len(pcm) > self.limits.max_chunk_bytes:
            raise _Refused(CLOSE_TOO_BIG, f"Audio message of {len(pcm)} bytes is over the {self.limits.max_chunk_bytes}"
                           "-byte limit; send 20-100 ms chunks.", param="audio", error_code="message_too_big")
        if len(pcm) % 2:
            raise _Refused(CLOSE_UNSUPPORTED, "Audio must be 16-bit PCM (2 bytes a sample); a message has an odd "
                           "number of bytes.", param="audio", error_code="unsupported_audio_format")
        return pcm

    def _control(self, text: str) -> str | None:
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's stack
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise _Refused(CLOSE_INVALID_PAYLOAD, "Text messages must be JSON objects with a 'type' "
                           "(session.configure, input.end or session.close); audio goes in binary messages.",
                           param="type")
        kind = body["type"]
        if kind == "session.configure":
            fmt, rate = body.get("format", "pcm16"), body.get("sample_rate", SAMPLE_RATE)
            if fmt != "pcm16" or rate != SAMPLE_RATE or body.get("channels", 1) != 1:
                raise _Refused(CLOSE_UNSUPPORTED, f"Unsupported audio: format {fmt!r} at {rate} Hz; this "
                               f"endpoint takes mono 'pcm16' at {SAMPLE_RATE} Hz.", param="format",
                               error_code="unsupported_audio_format")
            return kind
        if kind not in ("input.end", "session.close"):
            # An unknown type is a client bug worth reporting, not worth dropping the call for.
            self._later(error_event(f"Unknown message type {kind!r}; expected session.configure, input.end "
                                    "or session.close.", param="type"))
        return kind

    def _later(self, body: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._send(body))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _forward(self) -> None:
        """The pipeline's output to the client: audio as binary, the rest as events."""
        clock = TurnClock()
        async for frame in self.pipeline.run(self._source()):
            if isinstance(frame, AudioOutFrame):
                await self._send(frame.pcm)
            elif (event := _event(frame)) is not None:
                await self._send(event)
            if (timings := clock.observe(frame)) is not None:
                if self.owner.metrics is not None:
                    self.owner.metrics.record(self.id, timings)
                await self._send({"type": "turn.metrics", **asdict(timings)})
