"""The agent's answer, streamed from any ``StreamSource`` (a model server, or the gateway path).

A final transcript starts a generation at once, speculatively: its text is held back (here, or
with ``hold=False`` by the TTS stage, which then speaks it speculatively too) until
the turn ends, and thrown away if the user goes on speaking (a newer transcript starts a
new generation). Cancelling a generation closes the backend stream, which aborts the
request in the engine and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from blink.backends.base import GenerationRequest, SamplingOptions, StreamSource
from blink.protocol.errors import BlinkError
from blink.voice.frames import (
    EndFrame,
    ErrorFrame,
    FinalTranscriptFrame,
    Frame,
    InterruptFrame,
    SpeechStartFrame,
    TextDeltaFrame,
    TextEndFrame,
    TurnEndFrame,
)
from blink.voice.stage import Inbox

log = logging.getLogger("blink.voice")

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Answer in one or two short spoken sentences, without lists or markup."
)


class LlmStage:
    def __init__(self, backend: StreamSource, model: str, *, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 max_tokens: int = 128, temperature: float = 0.7, history_turns: int = 8, hold: bool = True) -> None:
        self.backend = backend
        self.model = model
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.temperature = temperature
        # Past exchanges kept in the prompt (user + assistant messages each): enough for
        # follow-up questions, bounded so the prompt (and TTFT) stays small.
        self.history_turns = history_turns
        self.history: list[dict[str, Any]] = []
        # False: the answer goes downstream before the turn ends, for a stage that gates it
        # itself (TtsStage synthesises the first clause during the hang and releases it at the turn end).
        self.hold = hold

    def _request(self, text: str) -> GenerationRequest:
        """Priority "voice": the engine's scheduler serves it ahead of interactive and batch work."""
        messages = [{"role": "system", "content": self.system_prompt}, *self.history[-2 * self.history_turns:],
                    {"role": "user", "content": text}]
        return GenerationRequest(request_id=f"voice-{uuid.uuid4().hex[:12]}", model=self.model, kind="chat",
                                 options=SamplingOptions(max_tokens=self.max_tokens, temperature=self.temperature),
                                 messages=messages, priority="voice")

    async def _generate(self, inbox: Inbox, generation: int, text: str, spoken: list[str]) -> None:
        started = time.perf_counter()
        first = True
        stream = self.backend.stream(self._request(text))
        try:
            async for delta in stream:
                if delta.text:
                    spoken.append(delta.text)
                    inbox.post(generation, TextDeltaFrame(
                        text=delta.text, ttft_s=time.perf_counter() - started if first else None))
                    first = False
            inbox.post(generation, TextEndFrame())
        except Exception as exc:  # a backend error ends this answer, not the session
            log.warning("voice generation failed: %s", exc)
            error = exc if isinstance(exc, BlinkError) else BlinkError(str(exc) or type(exc).__name__)
            inbox.post(generation, ErrorFrame(message=error.message, error_type=error.type, param=error.param,
                                              code=error.code))
            inbox.post(generation, TextEndFrame())
        finally:
            # Closing the stream is what aborts the engine request and frees its KV cache.
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        inbox = Inbox(frames)
        task: asyncio.Task[None] | None = None
        user_text = ""
        spoken: list[str] = []
        released = False  # the turn ended: this generation's text may go downstream
        held: list[Frame] = []
        done_early = False  # the whole answer went downstream (hold=False) before the turn ended

        async def cancel() -> None:
            nonlocal task
            inbox.cancel_work()
            held.clear()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                task = None

        def remember() -> None:
            if user_text and spoken:
                self.history += [{"role": "user", "content": user_text},
                                 {"role": "assistant", "content": "".join(spoken)}]

        try:
            while True:
                frame, upstream = await inbox.get()
                if frame is None:
                    if task is not None:
                        # Upstream ended mid-answer (a WAV file played to its end): finish the answer.
                        with contextlib.suppress(Exception):
                            await task
                        if released:
                            for f in inbox.drain_posts():
                                yield f
                            remember()
                    break
                if not upstream:
                    if not released and not self.hold:
                        yield frame
                        if isinstance(frame, TextEndFrame):
                            done_early, task = True, None
                    elif released:
                        yield frame
                        if isinstance(frame, TextEndFrame):
                            remember()
                            task = None
                    else:
                        held.append(frame)
                    continue
                if isinstance(frame, FinalTranscriptFrame):
                    yield frame
                    await cancel()
                    user_text, spoken, released, done_early = frame.text, [], False, False
                    if frame.text.strip():
                        task = asyncio.ensure_future(self._generate(inbox, inbox.generation, frame.text, spoken))
                    continue
                if isinstance(frame, TurnEndFrame):
                    yield frame
                    released = True
                    if done_early:
                        remember()
                        done_early = False
                    for f in held:
                        yield f
                        if isinstance(f, TextEndFrame):
                            remember()
                            task = None
                    held.clear()
                    continue
                if isinstance(frame, InterruptFrame | EndFrame):
                    if released and task is not None:
                        remember()  # what was said before the barge-in stays in the conversation
                    await cancel()
                    released = done_early = False
                    yield frame
                    if isinstance(frame, EndFrame):
                        return
                    continue
                if isinstance(frame, SpeechStartFrame) and not released:
                    # The user went on within the turn: the speculative answer is stale.
                    await cancel()
                    done_early = False
                yield frame
        finally:
            await cancel()
            await inbox.aclose()
