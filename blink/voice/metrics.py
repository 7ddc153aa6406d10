"""Per-turn latencies read off the frames at the pipeline's output, as histograms and a log line."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass

from prometheus_client import CollectorRegistry, Histogram

from blink.voice.chunker import ClauseChunker
from blink.voice.frames import (
    AudioOutFrame,
    FinalTranscriptFrame,
    Frame,
    InterruptFrame,
    SpeechStopFrame,
    TextDeltaFrame,
    TurnEndFrame,
)

log = logging.getLogger("blink.voice.turn")


@dataclass(slots=True)
class TurnTimings:
    """Seconds, all measured from the end of the user's speech (the VAD's first quiet frame)."""

    vad_hang_s: float  # speech end -> turn end (the silence the agent waits out)
    stt_final_s: float  # speech end -> final transcript
    llm_ttft_s: float  # request -> first text delta
    first_clause_s: float  # speech end -> the answer's first clause complete (what the TTS waits for)
    tts_first_audio_s: float  # first text released -> first audio frame
    voice_to_voice_s: float  # speech end -> first audio frame of the answer
    # The semantic end-of-turn model's wall time for this turn (part of vad_hang_s); None when it did not run.
    smart_turn_s: float | None = None


class TurnClock:
    """Watches the output frames of one session and completes a ``TurnTimings`` per answer."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._stop_at: float | None = None
        self._stt_s = 0.0
        self._turn_end_at: float | None = None
        self._smart_turn_s: float | None = None
        # When the turn end reached the output (observe() runs live, at the socket): the answer,
        # made speculatively before it, is released to the client from then on.
        self._released_at = 0.0
        self._ttft_s: float | None = None
        self._text_at: float | None = None
        # The TTS stage's chunker (same defaults) replayed on the released text: where the first clause ends.
        self._chunker = ClauseChunker()
        self._clause_at: float | None = None
        self._last_text_at = 0.0

    def _clause(self, frame: TextDeltaFrame) -> None:
        self._last_text_at = frame.at  # made, not released: a clause can be ready before the turn ends
        if self._clause_at is None and self._chunker.push(frame.text):
            self._clause_at = self._last_text_at

    def observe(self, frame: Frame) -> TurnTimings | None:
        if isinstance(frame, SpeechStopFrame):
            self._stop_at = frame.at
        elif isinstance(frame, FinalTranscriptFrame):
            self._stt_s = frame.latency_s
        elif isinstance(frame, TurnEndFrame):
            self._turn_end_at = frame.at
            self._smart_turn_s = frame.smart_turn_s
            self._released_at = time.perf_counter()
        elif isinstance(frame, TextDeltaFrame) and frame.ttft_s is not None and self._turn_end_at is not None:
            self._ttft_s = frame.ttft_s
            self._text_at = max(frame.at, self._released_at)
            self._clause(frame)
        elif isinstance(frame, TextDeltaFrame) and self._text_at is not None:
            self._clause(frame)
        elif isinstance(frame, InterruptFrame):
            self._reset()
        elif (isinstance(frame, AudioOutFrame) and self._text_at is not None and self._stop_at is not None
              and self._turn_end_at is not None and self._ttft_s is not None):
            # An answer shorter than one clause is spoken whole when it ends, right after its last delta.
            clause_at = self._clause_at if self._clause_at is not None else self._last_text_at
            audio_at = max(frame.at, self._released_at)  # synthesised during the hang, heard from the release
            timings = TurnTimings(vad_hang_s=self._turn_end_at - self._stop_at, stt_final_s=self._stt_s,
                                  llm_ttft_s=self._ttft_s, first_clause_s=clause_at - self._stop_at,
                                  tts_first_audio_s=audio_at - self._text_at,
                                  voice_to_voice_s=audio_at - self._stop_at, smart_turn_s=self._smart_turn_s)
            self._reset()
            return timings
        return None


class VoiceMetrics:
    """``blink_voice_stage_seconds{stage=...}`` histograms, on the app's metrics registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # Buckets from 10 ms (a TTS clause) to 5 s (a naive pipeline); the goal is 0.5 s.
        self.stage_seconds = Histogram(
            "blink_voice_stage_seconds", "Voice turn latency per stage, from the end of the user's speech",
            ["stage"], registry=registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0))

    def record(self, session_id: str, timings: TurnTimings) -> None:
        stages = {k: v for k, v in asdict(timings).items() if v is not None}  # smart_turn_s only when it ran
        for stage, value in stages.items():
            self.stage_seconds.labels(stage=stage.removesuffix("_s")).observe(value)
        log.info(json.dumps({"event": "voice_turn", "session": session_id,
                             **{k: round(v, 4) for k, v in stages.items()}}))
