"""Voice activity detection: Silero VAD (ONNX, shipped in the ``silero-vad`` wheel).

The model takes 512-sample (32 ms) frames at 16 kHz plus the 64 samples before them, and a
recurrent state that must be kept from frame to frame; ``SileroVad`` holds both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib import resources
from typing import Protocol

import numpy as np

from blink.voice.frames import (
    SAMPLE_RATE,
    AudioInFrame,
    EndFrame,
    Frame,
    SpeechStartFrame,
    SpeechStopFrame,
)

# Silero's model is trained on 512-sample windows at 16 kHz (32 ms); it needs 64 samples of context.
VAD_FRAME_SAMPLES = 512
_CONTEXT_SAMPLES = 64


class SpeechProbability(Protocol):
    """Speech probability of one 512-sample float32 frame; keeps its own state between calls."""

    def __call__(self, frame: np.ndarray) -> float: ...

    def reset(self) -> None: ...


class SileroVad:
    def __init__(self, model_path: str | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        path = model_path or str(resources.files("silero_vad") / "data" / "silero_vad.onnx")
        opts = ort.SessionOptions()
        # One thread: a 32 ms frame takes well under a millisecond, and the CPU is shared with STT.
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, _CONTEXT_SAMPLES), dtype=np.float32)

    def __call__(self, frame: np.ndarray) -> float:
        x = np.concatenate([self._context, frame.reshape(1, -1).astype(np.float32)], axis=1)
        out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = x[:, -_CONTEXT_SAMPLES:]
        return float(out[0, 0])


class VadStage:
    """Passes audio through and adds raw ``SpeechStart``/``SpeechStop`` frames.

    Start needs ``start_frames`` frames above ``threshold`` in a row (two frames, 64 ms: one
    click must not barge in on the agent); stop needs ``stop_frames`` below ``threshold - 0.15``
    (Silero's recommended hysteresis; two frames so a dip inside a word does not cost a
    speculative decode) and is stamped with the first quiet frame's time. Pauses between
    words are the turn stage's business.
    """

    def __init__(self, model: SpeechProbability, threshold: float = 0.5, start_frames: int = 2,
                 stop_frames: int = 2) -> None:
        self.model = model
        self.threshold = threshold
        self.stop_threshold = max(threshold - 0.15, 0.01)
        self.start_frames = start_frames
        self.stop_frames = stop_frames

    async def run(self, frames: AsyncIterator[Frame]) -> AsyncIterator[Frame]:
        buf = np.zeros(0, dtype=np.int16)
        speaking = False
        above = below = 0
        first_quiet_at = 0.0
        self.model.reset()
        async for frame in frames:
            if not isinstance(frame, AudioInFrame):
                yield frame
                if isinstance(frame, EndFrame):
                    return
                continue
            yield frame
            buf = np.concatenate([buf, np.frombuffer(frame.pcm, dtype=np.int16)])
            while len(buf) >= VAD_FRAME_SAMPLES:
                chunk, buf = buf[:VAD_FRAME_SAMPLES], buf[VAD_FRAME_SAMPLES:]
                p = self.model(chunk.astype(np.float32) / 32768.0)
                if not speaking:
                    above = above + 1 if p >= self.threshold else 0
                    if above >= self.start_frames:
                        speaking, above = True, 0
                        yield SpeechStartFrame(at=frame.at)
                elif p < self.stop_threshold:
                    below += 1
                    first_quiet_at = first_quiet_at if below > 1 else frame.at
                    if below >= self.stop_frames:
                        speaking, below = False, 0
                        yield SpeechStopFrame(at=first_quiet_at)
                else:
                    below = 0
