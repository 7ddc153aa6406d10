"""Text to speech: espeak-ng by default (Debian package, fast, no download).

The stage speaks each clause as soon as the chunker completes it and sends the audio on in
small frames, so the first clause is playing while the LLM is still writing the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import shutil
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from blink.voice.chunker import ClauseChunker
from blink.voice.frames import (
    SAMPLE_RATE,
    AudioOutFrame,
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

# 40 ms audio frames out: small enough that a barge-in drops almost nothing already sent,
# large enough that a WebSocket message per frame costs little (25 messages a second).
AUDIO_OUT_FRAME_S = 0.04


class Synthesizer(Protocol):
    """Speech for one clause as mono PCM16 bytes at ``SAMPLE_RATE``."""

    async def synthesize(self, text: str) -> bytes: ...


def resample_pcm16(pcm: bytes, rate_in: int, rate_out: int = SAMPLE_RATE) -> bytes:
    """Polyphase resampling (scipy) of mono PCM16."""
    if rate_in == rate_out or not pcm:
        return pcm
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(rate_in, rate_out)
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
    y = resample_poly(x, rate_out // g, rate_in // g)
    return np.clip(y, -32768, 32767).astype(np.int16).tobytes()


def wav_pcm16(wav: bytes) -> tuple[bytes, int]:
    """PCM and sample rate of a PCM16 WAV; tolerates the bogus sizes of a streamed header."""
    if len(wav) < 44 or wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        raise ValueError("not a WAV stream")
    pos = 12
    rate = SAMPLE_RATE
    while pos + 8 <= len(wav):
        cid, size = wav[pos:pos + 4], int.from_bytes(wav[pos + 4:pos + 8], "little")
        if cid == b"fmt ":
            rate = int.from_bytes(wav[pos + 12:pos + 16], "little")
        elif cid == b"data":
            return wav[pos + 8:], rate
        pos += 8 + size
    raise ValueError("WAV stream without a data chunk")


def speakable(text: str) -> str:
    """``text`` with control characters (a model can emit NUL) turned into spaces: a command-line
    argument cannot hold NUL, and no synthesiser should read out the others."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


class EspeakSynthesizer:
    def __init__(self, voice: str = "en-us", words_per_minute: int = 165, binary: str = "espeak-ng") -> None:
        path = shutil.which(binary)
        if path is None:
            raise RuntimeError(f"{binary} is not installed (Debian: apt-get install espeak-ng)")
        self.binary = path
        self.voice = voice
        # 165 wpm: a little slower than espeak's default 175, noticeably clearer.
        self.words_per_minute = words_per_minute
        # Imported now (espeak-ng speaks at 22.05 kHz, so every clause is resampled): the first
        # import of scipy.signal takes CPU time that would land on the first answer.
        importlib.import_module("scipy.signal")

    async def synthesize(self, text: str) -> bytes:
        proc = await asyncio.create_subprocess_exec(
            self.binary, "--stdout", "-v", self.voice, "-s", str(self.words_per_minute), "--", speakable(text),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        try:
            wav, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                with contextlib.suppress(Exception):
                    await proc.wait()
        pcm, rate = wav_pcm16(wav)
        return resample_pcm16(pcm, rate)


class TtsStage:
    """Text deltas in (passed on), audio frames out; an interrupt drops pending speech.

    An answer that starts before its turn has ended (the LLM stage's speculative generation,
    ``LlmStage(hold=False)``) is synthesised at once but held here, text and audio, until the
    turn ends, so its first clause is ready to play the moment the hang time is over; it is
    dropped if the user goes on speaking instead.
    """

    def __init__(self, synthesizer: Synthesizer, chunker: ClauseChunker | None = None) -> None:
        self.synthesizer = synthesizer
        self.chunker = chunker or ClauseChunker()

    async def _speak(self, inbox: Inbox, generation: int, clauses: asyncio.Queue[str | Frame | None]) -> None:
        """Speaks clauses in order; a frame in the queue (an answer's end) is posted after its audio."""
        step = int(AUDIO_OUT_FRAME_S * SAMPLE_RATE) * 2
        while (item := await clauses.get()) is not None:
            if not isinstance(item, str):
                inbox.post(generation, item)
                continue
            try:
                pcm = await self.synthesizer.synthesize(item)
            except Exception as exc:  # one clause that cannot be spoken must not silence the rest or hang the answer
                log.warning("speech synthesis failed: %s", exc)
                inbox.post(generation, ErrorFrame(message=f"Speech synthesis failed: {exc}"))
                continue
            for i in range(0, len(pcm), step):
                inbox.post(generation, AudioOutFrame(pcm=pcm[i:i + step]))

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        inbox = Inbox(frames)
        clauses: asyncio.Queue[str | Frame | None] = asyncio.Queue()
        speaker: asyncio.Task[None] | None = None
        released = True  # False from a final transcript to its turn's end: the answer is speculative
        held: list[Frame] = []

        def gate(frame: Frame) -> list[Frame]:
            """What goes downstream now: the answer's output waits while it is speculative."""
            if released or not (frame.interruptible or isinstance(frame, ErrorFrame)):
                return [frame]
            held.append(frame)
            return []

        async def stop() -> None:
            nonlocal speaker, clauses
            held.clear()
            inbox.cancel_work()
            self.chunker.reset()
            if speaker is not None:
                speaker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await speaker
            speaker, clauses = None, asyncio.Queue()

        def say(items: list[str | Frame]) -> None:
            nonlocal speaker
            for item in items:
                clauses.put_nowait(item)
            if items and speaker is None:
                speaker = asyncio.ensure_future(self._speak(inbox, inbox.generation, clauses))

        try:
            while True:
                frame, upstream = await inbox.get()
                if frame is None:
                    if speaker is not None:  # upstream ended: speak what is queued, then stop
                        clauses.put_nowait(None)
                        with contextlib.suppress(Exception):
                            await speaker
                        speaker = None
                        for f in inbox.drain_posts() if released else []:
                            yield f
                    break
                if not upstream:
                    for f in gate(frame):
                        yield f
                    continue
                if isinstance(frame, TextDeltaFrame):
                    for f in gate(frame):
                        yield f
                    say(list(self.chunker.push(frame.text)))
                    continue
                if isinstance(frame, TextEndFrame):
                    last = self.chunker.flush()
                    if speaker is None and not last:
                        for f in gate(frame):
                            yield f
                    else:  # the end marker follows the answer's audio
                        say([last, frame] if last else [frame])
                    continue
                if isinstance(frame, FinalTranscriptFrame):
                    if not released:  # a newer transcript of the same turn: its answer replaces this one
                        await stop()
                    released = False
                elif isinstance(frame, TurnEndFrame):
                    yield frame
                    released = True
                    out, held[:] = list(held), []
                    for f in out:
                        yield f
                    continue
                elif isinstance(frame, SpeechStartFrame) and not released:
                    await stop()  # the user went on within the turn: the speculative answer is stale
                if isinstance(frame, InterruptFrame | EndFrame):
                    await stop()
                    released = True
                    yield frame
                    if isinstance(frame, EndFrame):
                        return
                    continue
                yield frame
        finally:
            await stop()
            await inbox.aclose()
