"""Idle-time pre-computation on a replayed support trace, on the real SmolLM2-135M-Instruct.

One ``blink serve`` (embedded engine on the cached SmolLM2 GGUF, exact + semantic cache in
memory) pinned to one core, this client on the other. The trace (benchmarks/precompute_trace.py,
fixed seed) is replayed twice, each time on a fresh server: with ``cache.precompute.predict``
off, then on. ``--users`` conversations run at once, each turn streamed after the user's think
time; alongside, cache-bypassing interactive probes (the same ones in both runs) arrive at
``--probe-rate`` a second, so the idle lane's cost to users is measured on identical requests.

Prints: the share of user turns answered from pre-computed entries; the TTFT p50/p99 of those
turns against the same turns without pre-computation; the probes' p99 TTFT with the idle lane
busy against idle (goal <= 1.05x); the tokens pre-computation spent.

    python benchmarks/precompute.py [--quick] [--conversations 48] [--users 4] [--seed 7]
        [--max-tokens 48] [--probe-rate 0.5] [--min-count 2] [--engine-nice 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from _proc import cpu_line, free_port, pct, pinned, split_cores, stop, wait_ready
from precompute_trace import SYSTEM, Conversation, generate

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class TurnResult:
    cid: int
    index: int
    step: int
    cache: str
    precomputed: str
    ttft_ms: float


def start_server(model: Path, port: int, tmp: Path, cores: set[int] | None, predict: bool,
                 args: argparse.Namespace) -> subprocess.Popen[bytes]:  # fmt: skip
    precompute: dict[str, Any] = {"predict": predict, "predict_min_count": args.min_count}
    config = {
        "server": {"port": port, "log_level": "warning"},
        "models": [{"name": "m", "kind": "embedded", "model": str(model), "threads": 1,
                    "engine_nice": args.engine_nice}],
        "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True}, "store": "memory",
                  "precompute": precompute},
        "obs": {"request_log": "off"},
    }
    (tmp / "blink.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "blink.cli", "serve", "--config", str(tmp / "blink.yaml")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, preexec_fn=pinned(cores), stdout=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/ready", proc, timeout=300)
    return proc


async def stream_chat(client: httpx.AsyncClient, messages: list[dict[str, Any]], max_tokens: int,
                      bypass: bool = False) -> tuple[float, str, dict[str, str]]:  # fmt: skip
    """(TTFT ms to the first content chunk, the whole answer, the response headers)."""
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                            "stream": True}
    if bypass:
        body["cache"] = False
    t0 = time.perf_counter()
    ttft: float | None = None
    parts: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        headers = dict(resp.headers)
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            for choice in chunk.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    if ttft is None:
                        ttft = (time.perf_counter() - t0) * 1000
                    parts.append(text)
    return (ttft if ttft is not None else float("nan")), "".join(parts), headers


async def converse(client: httpx.AsyncClient, conv: Conversation, max_tokens: int) -> list[TurnResult]:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    out = []
    for i, turn in enumerate(conv.turns):
        await asyncio.sleep(turn.think_s)
        history.append({"role": "user", "content": turn.question})
        ttft, answer, headers = await stream_chat(client, history, max_tokens)
        history.append({"role": "assistant", "content": answer})
        out.append(TurnResult(conv.cid, i, turn.step, headers.get("x-blink-cache", "?"),
                              headers.get("x-blink-precomputed", ""), ttft))
    return out


async def users(client: httpx.AsyncClient, trace: list[Conversation], n: int, max_tokens: int) -> list[TurnResult]:
    queue: asyncio.Queue[Conversation] = asyncio.Queue()
    for conv in trace:
        queue.put_nowait(conv)
    results: list[TurnResult] = []

    async def user() -> None:
        while not queue.empty():
            results.extend(await converse(client, queue.get_nowait(), max_tokens))

    await asyncio.gather(*(user() for _ in range(n)))
    return results


async def probes(client: httpx.AsyncClient, rate: float, seed: int, done: asyncio.Event) -> list[float]:
    """Cache-bypassing interactive requests, open loop, Poisson arrivals from ``seed``: the same
    sequence in both runs."""
    rng = random.Random(seed)
    tasks = []
    i = 0
    while not done.is_set():
        await asyncio.sleep(rng.expovariate(rate))
        msgs = [{"role": "user", "content": f"Probe {i}: name one colour of the rainbow."}]
        tasks.append(asyncio.create_task(stream_chat(client, msgs, 8, bypass=True)))
        i += 1
    return [t[0] for t in await asyncio.gather(*tasks)]


def scrape(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in re.finditer(rf"^{name}\{{(.*?)\}} ([0-9.e+]+)$", text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


async def run_mode(port: int, trace: list[Conversation], args: argparse.Namespace) -> tuple[list[TurnResult], list[float], str]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits) as client:
        for i in range(3):  # warm-up outside the trace's flows: no cache, no learning
            await stream_chat(client, [{"role": "user", "content": f"Warm-up {i}: say hello."}], 8, bypass=True)
        done = asyncio.Event()
        probe_task = asyncio.create_task(probes(client, args.probe_rate, args.seed, done))
        turns = await users(client, trace, args.users, args.max_tokens)
        done.set()
        probe_ttfts = await probe_task
        metrics = (await client.get("/metrics")).text
    return turns, probe_ttfts, metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="12 conversations, 2 users: proves it runs")
    ap.add_argument("--conversations", type=int, default=48)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--probe-rate", type=float, default=0.5)
    ap.add_argument("--min-count", type=int, default=2, help="cache.precompute.predict_min_count")
    ap.add_argument("--engine-nice", type=int, default=0,
                    help="engine-core niceness: >0 lets the gateway's work preempt the engine on the shared core")
    args = ap.parse_args()
    if args.quick:
        args.conversations, args.users, args.max_tokens = 12, 2, 24
    from blink.demo.default_model import fetch_smollm2

    model = fetch_smollm2()
    trace = generate(args.seed, args.conversations)
    server_cores, client_cores = split_cores()
    if client_cores:
        os.sched_setaffinity(0, client_cores)
    runs: dict[str, tuple[list[TurnResult], list[float], str]] = {}
    for mode in ("off", "on"):
        with tempfile.TemporaryDirectory(prefix="blink-bench-precompute-") as tmp:
            port = free_port()
            t0 = time.perf_counter()
            proc = start_server(model, port, Path(tmp), server_cores, mode == "on", args)
            try:
                print(f"run with pre-computation {mode} ...", flush=True)
                runs[mode] = asyncio.run(run_mode(port, trace, args))
            finally:
                stop(proc)
            print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
    report(runs, args)


def report(runs: dict[str, tuple[list[TurnResult], list[float], str]], args: argparse.Namespace) -> None:
    off_turns, off_probes, _ = runs["off"]
    on_turns, on_probes, metrics = runs["on"]
    n = len(on_turns)
    print(f"\ntrace: seed {args.seed}, {args.conversations} conversations, {n} user turns, {args.users} users at "
          f"once, max_tokens {args.max_tokens}; probes at {args.probe_rate}/s ({len(off_probes)} off, "
          f"{len(on_probes)} on)")
    for mode, (turns, _, _) in runs.items():
        outcomes = {o: sum(t.cache == o for t in turns) for o in ("exact", "semantic", "miss")}
        print(f"pre-computation {mode:3}: cache outcomes {outcomes}")
    pre = [t for t in on_turns if t.precomputed == "predict"]
    later = [t for t in on_turns if t.index > 0]
    print(f"SHARE of user turns answered from pre-computed entries: {len(pre)}/{n} = {len(pre) / max(1, n):.1%} "
          f"(of follow-up turns: {len(pre)}/{len(later)} = {len(pre) / max(1, len(later)):.1%})")
    same = {(t.cid, t.index): t for t in off_turns}
    pairs = [(t.ttft_ms, same[(t.cid, t.index)].ttft_ms) for t in pre if (t.cid, t.index) in same]
    if pairs:
        with_pre, without = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"TTFT of those turns, pre-computed: p50 {pct(with_pre, 50):7.1f} ms  p99 {pct(with_pre, 99):7.1f} ms")
        print(f"TTFT of the same turns without:    p50 {pct(without, 50):7.1f} ms  p99 {pct(without, 99):7.1f} ms")
    for mode, (turns, _, _) in runs.items():
        miss = [t.ttft_ms for t in turns if t.cache == "miss"]
        print(f"user turns generated by the engine, pre-computation {mode:3}: {len(miss)}, TTFT p50 "
              f"{pct(miss, 50):7.1f} ms  p99 {pct(miss, 99):7.1f} ms")
    print(f"probes (cache bypassed), idle lane idle: p50 {pct(off_probes, 50):7.1f} ms  p99 {pct(off_probes, 99):7.1f} ms")
    print(f"probes (cache bypassed), idle lane busy: p50 {pct(on_probes, 50):7.1f} ms  p99 {pct(on_probes, 99):7.1f} ms")
    jobs = scrape(metrics, "blink_precompute_jobs_total")
    tokens = scrape(metrics, "blink_precompute_tokens_total")
    skipped = scrape(metrics, "blink_precompute_skipped_total")
    print(f"pre-computation jobs {jobs}; skipped {skipped}; tokens spent idle {sum(tokens.values()):.0f}")
    ratio = pct(on_probes, 99) / pct(off_probes, 99)
    print(f"RATIO interactive p99 TTFT with the idle lane on / off: {ratio:.2f}x (goal <= 1.05) "
          f"{'PASS' if ratio <= 1.05 else 'MISS'}")


if __name__ == "__main__":
    print(cpu_line(), flush=True)
    main()
