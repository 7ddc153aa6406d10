"""``blink voice FILE.wav`` / ``blink voice --mic``: streams a WAV file (as a microphone would) or the
microphone into a server's ``/v1/voice``, prints the transcripts, the answers and each turn's
per-stage timings, and saves the answers' audio (``--mic`` also plays it)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from blink.voice.frames import SAMPLE_RATE

# 20 ms: a common microphone buffer; the server's VAD re-frames to 32 ms.
_CHUNK_S = 0.02
# Silence streamed after the file so the last turn ends (hang time) and its answer can finish.
_TAIL_S = 1.5


def _read_wav(path: Path) -> bytes:
    """16 kHz mono PCM16 of a PCM16 WAV file (other rates are resampled, stereo is mixed down)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise typer.BadParameter(f"{path} is not 16-bit PCM")
        rate, channels, pcm = w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())
    if channels > 1:
        import numpy as np

        pcm = np.frombuffer(pcm, dtype=np.int16).reshape(-1, channels).mean(axis=1).astype(np.int16).tobytes()
    if rate != SAMPLE_RATE:
        from blink.voice.tts import resample_pcm16

        pcm = resample_pcm16(pcm, rate)
    return pcm


async def _session(url: str, headers: dict[str, str], out: Path | None, speaker: Any,
                   feed: Callable[[Any], Awaitable[None]]) -> None:
    """One conversation: ``feed`` sends the audio while the answers are printed, played and kept."""
    from websockets.asyncio.client import connect

    answer = bytearray()
    async with connect(url, additional_headers=headers, max_size=2**22) as ws:

        async def receive() -> None:
            async for msg in ws:
                if isinstance(msg, bytes):
                    answer.extend(msg)
                    if speaker is not None:
                        speaker.play(msg)
                    continue
                event = json.loads(msg)
                if event["type"] == "response.interrupted" and speaker is not None:
                    speaker.flush()  # audio comes faster than real time: drop the rest of that answer
                _show(event)

        reader = asyncio.ensure_future(receive())
        try:
            await feed(ws)
            await reader
        finally:
            reader.cancel()
    if out is not None:
        with wave.open(str(out), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(bytes(answer))
        typer.echo(f"answer audio: {len(answer) / 2 / SAMPLE_RATE:.1f} s -> {out}")


def _wav_feed(pcm: bytes, speed: float) -> Callable[[Any], Awaitable[None]]:
    """Streams the file in real time (or ``speed`` times faster), then silence so the last turn ends."""

    async def feed(ws: Any) -> None:
        clip = pcm + bytes(int(_TAIL_S * SAMPLE_RATE) * 2)
        step = int(_CHUNK_S * SAMPLE_RATE) * 2
        t0 = time.perf_counter()
        for i in range(0, len(clip), step):
            await ws.send(clip[i:i + step])
            await asyncio.sleep(max(0.0, t0 + (i // step + 1) * _CHUNK_S / speed - time.perf_counter()))
        await ws.send(json.dumps({"type": "input.end"}))

    return feed


def _mic_feed(mic: Any) -> Callable[[Any], Awaitable[None]]:
    """Streams the microphone until Ctrl-C, then closes the session at once."""

    async def feed(ws: Any) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, mic.stop)
        try:
            mic.start()
            typer.echo(f"listening on {mic.name} (Ctrl-C to stop)")
            while (pcm := await mic.chunks.get()) is not None:
                await ws.send(pcm)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            mic.stop()
        await ws.send(json.dumps({"type": "session.close"}))

    return feed


async def _talk(url: str, headers: dict[str, str], out: Path | None) -> None:
    """The microphone in, the answers out on the speaker (when there is one) and in ``out``."""
    from blink.voice.sound_devices import Microphone, SoundDeviceUnavailable, Speaker

    mic = Microphone(_CHUNK_S)  # raises SoundDeviceUnavailable before anything connects
    try:
        speaker = Speaker()
    except SoundDeviceUnavailable as exc:
        typer.echo(f"{exc}: answers are not played", err=True)
        speaker = None
    try:
        await _session(url, headers, out, speaker, _mic_feed(mic))
    finally:
        if speaker is not None:
            speaker.close()


def _show(event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "transcript.final":
        typer.echo(f"\nyou: {event['text']}")
    elif kind == "response.text.delta":
        typer.echo(event["text"], nl=False)
    elif kind == "response.done":
        typer.echo("")
    elif kind == "response.interrupted":
        typer.echo(" [interrupted]")
    elif kind == "turn.metrics":
        stages = ", ".join(f"{k.removesuffix('_s')} {v * 1000:.0f} ms" for k, v in event.items()
                           if k != "type" and v is not None)
        typer.echo(f"  timings: {stages}")
    elif kind == "error":
        typer.echo(f"\nerror: {event['error']['message']}", err=True)


def voice(
    wav: Annotated[Path | None, typer.Argument(help="WAV file (16-bit PCM; 16 kHz mono is sent as is).")] = None,
    mic: Annotated[bool, typer.Option("--mic", help="Talk through the microphone instead (Ctrl-C ends).")] = False,
    url: Annotated[str, typer.Option(help="The server's voice endpoint.")] = "ws://127.0.0.1:8000/v1/voice",
    out: Annotated[Path | None, typer.Option(help="Write the answers' audio to this WAV file.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="BLINK_API_KEY", help="API key, when the server requires one.")] = None,
    speed: Annotated[float, typer.Option(help="Playback speed (1 = real time, as a microphone).", min=0.1)] = 1.0,
    fetch_smart_turn: Annotated[bool, typer.Option(
        "--fetch-smart-turn", help="Only fetch smart-turn v3 (voice.smart_turn: pipecat) into ~/.cache/blink.")] = False,
) -> None:
    """Talk to a server's /v1/voice with a WAV file or the microphone; print transcripts, answers and
    per-stage timings."""
    if fetch_smart_turn:
        from blink.voice.smart_turn_fetch import SmartTurnUnavailable, resolve_smart_turn

        try:
            typer.echo(f"smart-turn v3: {resolve_smart_turn('pipecat')}")
        except SmartTurnUnavailable as exc:
            _fail(str(exc))
        return
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    if mic == (wav is not None):
        raise typer.BadParameter("give a WAV file or --mic (one of them)")
    if wav is not None:
        if not wav.is_file():
            raise typer.BadParameter(f"{wav} does not exist")
        pcm = _read_wav(wav)
    from blink.voice.sound_devices import SoundDeviceUnavailable

    try:
        asyncio.run(_session(url, headers, out, None, _wav_feed(pcm, speed)) if wav is not None
                    else _talk(url, headers, out))
    except SoundDeviceUnavailable as exc:
        _fail(str(exc))
    except OSError as exc:  # refused, unreachable: the server is not there
        _fail(f"cannot reach {url}: {exc}")
    except KeyboardInterrupt:  # Ctrl-C before the microphone was listening, or during a WAV
        typer.echo("stopped", err=True)


def _fail(message: str) -> None:
    """One line on stderr and exit code 2 (a usage problem here, not a crash)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
