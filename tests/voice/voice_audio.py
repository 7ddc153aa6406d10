"""Test audio: sentences spoken by espeak-ng, resampled to 16 kHz mono PCM16, and a small WER."""

from __future__ import annotations

import re
import subprocess

import numpy as np

from blink.voice.frames import SAMPLE_RATE, AudioInFrame
from blink.voice.tts import resample_pcm16, wav_pcm16

# Sentences tiny.en transcribes from espeak-ng's voice; together they are the WER set.
SENTENCES = [
    "We should leave for the airport early tomorrow morning.",
    "How many apples are left in the basket?",
    "My favorite color is green.",
    "Please close the door behind you.",
    "The train to the city leaves at noon.",
    "Can you call me back later today?",
]

# Whisper's window is fed in 32 ms frames, the VAD's native size.
FRAME_BYTES = 512 * 2


def speak(text: str, words_per_minute: int = 150) -> bytes:
    """16 kHz mono PCM16 of ``text`` spoken by espeak-ng (US English)."""
    wav = subprocess.run(["espeak-ng", "--stdout", "-v", "en-us", "-s", str(words_per_minute), "--", text],
                         capture_output=True, check=True, timeout=30).stdout
    pcm, rate = wav_pcm16(wav)
    return resample_pcm16(pcm, rate)


def silence(seconds: float) -> bytes:
    return bytes(int(seconds * SAMPLE_RATE) * 2)


def frames_of(pcm: bytes) -> list[AudioInFrame]:
    return [AudioInFrame(pcm=pcm[i:i + FRAME_BYTES]) for i in range(0, len(pcm), FRAME_BYTES)]


def pcm_to_float(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, reference length): the numerator and denominator of WER."""
    ref, hyp = _words(reference), _words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)], len(ref)
