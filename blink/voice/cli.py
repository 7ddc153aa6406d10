"""``blink voice FILE.wav``: plays a WAV file into a server's ``/v1/voice`` as a microphone would,
prints the transcripts, the answers and each turn's per-stage timings, and saves the answers' audio."""

from __future__ import annotations

import asyncio
import json
import time
import wave
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


async def _play(url: str, pcm: bytes, out: Path | None, headers: dict[str, str], speed: float) -> None:
    from websockets.asyncio.client import connect

    answer = bytearray()
    async with connect(url, additional_headers=headers, max_size=2**22) as ws:

        async def receive() -> None:
            async for msg in ws:
                if isinstance(msg, bytes):
                    answer.extend(msg)
                    continue
                _show(json.loads(msg))

        reader = asyncio.ensure_future(receive())
        clip = pcm + bytes(int(_TAIL_S * SAMPLE_RATE) * 2)
        step = int(_CHUNK_S * SAMPLE_RATE) * 2
        t0 = time.perf_counter()
        for i in range(0, len(clip), step):
            await ws.send(clip[i:i + step])
            await asyncio.sleep(max(0.0, t0 + (i // step + 1) * _CHUNK_S / speed - time.perf_counter()))
        await ws.send(json.dumps({"type": "input.end"}))
        await reader
    if out is not None:
        with wave.open(str(out), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(bytes(answer))
        typer.echo(f"answer audio: {len(answer) / 2 / SAMPLE_RATE:.1f} s -> {out}")


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
        stages = ", ".join(f"{k.removesuffix('_s')} {v * 1000:.0f} ms" for k, v in event.items() if k != "type")
        typer.echo(f"  timings: {stages}")
    elif kind == "error":
        typer.echo(f"\nerror: {event['error']['message']}", err=True)


def voice(
    wav: Annotated[Path, typer.Argument(help="WAV file (16-bit PCM; 16 kHz mono is sent as is).", exists=True)],
    url: Annotated[str, typer.Option(help="The server's voice endpoint.")] = "ws://127.0.0.1:8000/v1/voice",
    out: Annotated[Path | None, typer.Option(help="Write the answers' audio to this WAV file.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="BLINK_API_KEY", help="API key, when the server requires one.")] = None,
    speed: Annotated[float, typer.Option(help="Playback speed (1 = real time, as a microphone).", min=0.1)] = 1.0,
) -> None:
    """Talk to a server's /v1/voice with a WAV file; print transcripts, answers and per-stage timings."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    asyncio.run(_play(url, _read_wav(wav), out, headers, speed))
