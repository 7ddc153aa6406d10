"""Semantic end of turn: Pipecat's smart-turn v3, asked whether the user has finished.

Silence alone cannot tell a finished question from a pause to think ("I would like to order
a ..."); smart-turn v3 (a Whisper-encoder classifier, ONNX, in the ``pipecat-ai`` wheel) scores
the last 8 s of the turn's audio for "complete". A check costs a sizeable share of the voice
budget (``benchmarks/voice_latency.py --smart-turn``; RESULTS.md, "Figures behind the code's numbers", voice), so it is an option, off by
default, run once per pause that outlasts the hang (blink/voice/turn.py), in a thread.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from blink.voice.frames import SAMPLE_RATE

# The model's input: the last 8 s of audio (Pipecat's MAX_DURATION_SECONDS), left-padded with
# silence, as an 80 x 800 Whisper log-mel (10 ms hop).
WINDOW_SAMPLES = 8 * SAMPLE_RATE
# Pipecat's LocalSmartTurnAnalyzerV3 calls a turn complete when the probability is > 0.5.
DEFAULT_THRESHOLD = 0.5
# Pipecat normalises the waveform to zero mean, unit variance first (transformers' do_normalize).
_NORM_EPS = 1e-7


class TurnCompletion(Protocol):
    """Probability that the turn is complete, from mono float32 16 kHz audio ending now.

    Blocking (the turn stage runs it in a thread); must be safe to call from several threads."""

    def __call__(self, audio: np.ndarray) -> float: ...


class SmartTurnModel:
    """smart-turn v3 on ONNX Runtime, features from faster-whisper's (numpy) Whisper extractor.

    ONNX Runtime sessions may run from several threads at once, and the extractor keeps no
    state between calls, so one instance serves every voice session."""

    def __init__(self, path: str, threads: int = 1) -> None:
        import onnxruntime as ort
        from faster_whisper.feature_extractor import FeatureExtractor

        opts = ort.SessionOptions()
        # One thread: the check shares the CPU with Whisper and the engine; 1 thread is what was measured.
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        self._features = FeatureExtractor(feature_size=80)
        self.path = path

    def features(self, audio: np.ndarray) -> np.ndarray:
        """(1, 80, 800) log-mel of the last 8 s, as Pipecat computes it (pad left, normalise, mel)."""
        x = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
        x = np.pad(x, (WINDOW_SAMPLES - len(x), 0))
        x = (x - x.mean()) / np.sqrt(x.var() + _NORM_EPS)
        # padding=0: 128,000 samples give 801 STFT frames, the extractor drops the last -> 800.
        mel = self._features(x, padding=0)
        return np.ascontiguousarray(mel[None], dtype=np.float32)

    def __call__(self, audio: np.ndarray) -> float:
        out = self._session.run(None, {"input_features": self.features(audio)})
        return float(np.asarray(out[0]).reshape(-1)[0])
