"""The machine's microphone and speaker for ``blink voice --mic``, through ``sounddevice`` (PortAudio).

Everything that can be missing (the ``sounddevice`` package, the PortAudio library, an input
device) is reported as one ``SoundDeviceUnavailable`` with a message saying what to do, so the
CLI can print one line instead of a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from blink.voice.frames import SAMPLE_RATE
from blink.voice.tts import resample_pcm16


class SoundDeviceUnavailable(RuntimeError):
    """No usable sound device here (the message says why)."""


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """ALSA prints its probing of absent cards straight to fd 2; hide it while PortAudio starts."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def load_sounddevice() -> Any:
    """The ``sounddevice`` module, with PortAudio loaded and initialised."""
    try:
        with _quiet_stderr():
            import sounddevice
    except ImportError as exc:
        raise SoundDeviceUnavailable(
            f"sounddevice is not installed ({exc}); pip install 'blink-serve[voice]'") from exc
    except OSError as exc:  # sounddevice raises OSError when libportaudio is absent
        raise SoundDeviceUnavailable(
            f"the PortAudio library is missing ({exc}); on Debian: apt-get install libportaudio2") from exc
    return sounddevice


class Microphone:
    """16 kHz mono PCM16 chunks from the default input device, into an asyncio queue.

    PortAudio calls back on its own thread; each chunk is handed to the event loop. A device
    that cannot record at 16 kHz records at its own rate and each chunk is resampled."""

    def __init__(self, chunk_s: float) -> None:
        sd = load_sounddevice()
        try:
            with _quiet_stderr():
                device = sd.query_devices(kind="input")
        except Exception as exc:  # PortAudioError, or ValueError when there is no default device
            raise SoundDeviceUnavailable(f"no microphone: no audio input device found ({exc})") from exc
        self.name = str(device["name"])
        self._sd = sd
        self._rate = SAMPLE_RATE
        try:
            sd.check_input_settings(samplerate=SAMPLE_RATE, channels=1, dtype="int16")
        except Exception:
            self._rate = int(device["default_samplerate"])
        self._blocksize = int(chunk_s * self._rate)
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._stream: Any = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def on_audio(indata: Any, frames: int, time_info: Any, status: Any) -> None:
            pcm = bytes(indata)
            if self._rate != SAMPLE_RATE:
                pcm = resample_pcm16(pcm, self._rate)
            loop.call_soon_threadsafe(self.chunks.put_nowait, pcm)

        try:
            self._stream = self._sd.RawInputStream(samplerate=self._rate, channels=1, dtype="int16",
                                                   blocksize=self._blocksize, callback=on_audio)
            self._stream.start()
        except Exception as exc:
            raise SoundDeviceUnavailable(f"no microphone: cannot open {self.name} ({exc})") from exc

    def stop(self) -> None:
        """Ends the queue (a ``None``) and closes the device."""
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None
        self.chunks.put_nowait(None)


class Speaker:
    """Plays the answers' 16 kHz PCM16 on the default output device as they arrive; ``flush``
    drops what is buffered (the user talked over the answer)."""

    def __init__(self) -> None:
        sd = load_sounddevice()
        self._buf = bytearray()
        self._lock = threading.Lock()

        def on_output(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
            with self._lock:
                n = min(len(outdata), len(self._buf))
                outdata[:n] = self._buf[:n]
                del self._buf[:n]
            outdata[n:] = b"\0" * (len(outdata) - n)

        try:
            with _quiet_stderr():
                self._stream = sd.RawOutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="int16",
                                                  callback=on_output)
                self._stream.start()
        except Exception as exc:
            raise SoundDeviceUnavailable(f"no speaker: no audio output device ({exc})") from exc

    def play(self, pcm: bytes) -> None:
        with self._lock:
            self._buf += pcm

    def flush(self) -> None:
        with self._lock:
            self._buf.clear()

    def close(self) -> None:
        self._stream.stop()
        self._stream.close()
