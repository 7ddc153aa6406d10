"""Idle-time pre-computation on a replayed support trace, on the real SmolLM2-135M-Instruct.

One ``blink serve`` (embedded engine on the cached SmolLM2 GGUF, exact + semantic cache in
memory) pinned to one core, this client on the other. The trace (benchmarks/precompute_trace.py,
fixed seed) is replayed on a fresh server with ``cache.precompute.predict`` off and on, in
``--rounds`` alternating rounds (off, on, then on, off, ...) so a drift in the machine's load
falls on both. ``--users`` conversations run at once, each turn streamed after the user's think
time; alongside, cache-bypassing interactive probes arrive at ``--probe-rate`` a second (Poisson,
the same sequence in both modes) until ``--probes`` have been sent in each mode; the users go on
with fresh variations of the trace (seed + n) until then, so every probe lands on a live trace.

Prints: the share of user turns answered from pre-computed entries; the TTFT p50/p99 of those
turns against the same turns without pre-computation; the probes' p99 TTFT with the idle lane
busy against idle, with a bootstrap 95% interval (goal <= 1.05x); the tokens pre-computation spent.

    python benchmarks/precompute.py [--quick] [--conversations 48] [--users 4] [--seed 7]
        [--max-tokens 48] [--probes 240] [--probe-rate 1.0] [--rounds 2] [--min-count 2] [--engine-nice 0]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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
    sub: int  # which variation of the trace (seed + sub)
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
    wait_ready(f"http://127.0.0.1:{port}/ready", proc, timeout=900)  # a loaded shared core: minutes
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


async def converse(client: httpx.AsyncClient, sub: int, conv: Conversation, max_tokens: int) -> list[TurnResult]:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    out = []
    for i, turn in enumerate(conv.turns):
        await asyncio.sleep(turn.think_s)
        history.append({"role": "user", "content": turn.question})
        ttft, answer, headers = await stream_chat(client, history, max_tokens)
        history.append({"role": "assistant", "content": answer})
        out.append(TurnResult(sub, conv.cid, i, turn.step, headers.get("x-blink-cache", "?"),
                              headers.get("x-blink-precomputed", ""), ttft))
    return out


async def users(client: httpx.AsyncClient, args: argparse.Namespace, seed: int,
                done: asyncio.Event) -> list[TurnResult]:  # fmt: skip
    """``args.users`` users take conversations from the trace, then from its variations (seed + 1,
    + 2, ...), until ``done``: the trace is live for as long as the probes run."""
    def conversations() -> Iterator[tuple[int, Conversation]]:
        for sub in itertools.count():
            for conv in generate(seed + sub, args.conversations):
                yield sub, conv

    source = conversations()
    results: list[TurnResult] = []

    async def user() -> None:
        while not done.is_set():
            sub, conv = next(source)
            results.extend(await converse(client, sub, conv, args.max_tokens))

    await asyncio.gather(*(user() for _ in range(args.users)))
    return results


async def probes(client: httpx.AsyncClient, rate: float, seed: int, count: int) -> list[float]:
    """``count`` cache-bypassing interactive requests, open loop, Poisson arrivals from ``seed``:
    the same sequence in both modes."""
    rng = random.Random(seed)
    tasks = []
    for i in range(count):
        await asyncio.sleep(rng.expovariate(rate))
        msgs = [{"role": "user", "content": f"Probe {i}: name one colour of the rainbow."}]
        tasks.append(asyncio.create_task(stream_chat(client, msgs, 8, bypass=True)))
    return [t[0] for t in await asyncio.gather(*tasks)]


def scrape_sum(text: str, name: str) -> dict[str, float]:
    """A counter's series summed over the scrapes in ``text`` (one per server run)."""
    out: dict[str, float] = {}
    for m in re.finditer(rf"^{name}\{{(.*?)\}} ([0-9.e+]+)$", text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


async def run_mode(port: int, seed: int, count: int,
                   args: argparse.Namespace) -> tuple[list[TurnResult], list[float], str]:  # fmt: skip
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits) as client:
        for i in range(3):  # warm-up outside the trace's flows: no cache, no learning
            await stream_chat(client, [{"role": "user", "content": f"Warm-up {i}: say hello."}], 8, bypass=True)
        done = asyncio.Event()
        user_task = asyncio.create_task(users(client, args, seed, done))
        probe_ttfts = await probes(client, args.probe_rate, seed, count)
        done.set()
        turns = await user_task
        metrics = (await client.get("/metrics")).text
    return turns, probe_ttfts, metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="12 conversations, 2 users: proves it runs")
    ap.add_argument("--conversations", type=int, default=48)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--probes", type=int, default=240, help="probes per mode (>= 200 for a p99)")
    ap.add_argument("--probe-rate", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternating off/on rounds (a fresh server each)")
    ap.add_argument("--min-count", type=int, default=2, help="cache.precompute.predict_min_count")
    ap.add_argument("--engine-nice", type=int, default=0,
                    help="engine-core niceness: >0 lets the gateway's work preempt the engine on the shared core")
    args = ap.parse_args()
    if args.quick:
        args.conversations, args.users, args.max_tokens, args.probes, args.rounds = 12, 2, 24, 40, 1
    from blink.demo.default_model import fetch_smollm2

    model = fetch_smollm2()
    server_cores, client_cores = split_cores()
    if client_cores:
        os.sched_setaffinity(0, client_cores)
    runs: dict[str, tuple[list[TurnResult], list[float], str]] = {"off": ([], [], ""), "on": ([], [], "")}
    per_round = -(-args.probes // args.rounds)
    for r in range(args.rounds):
        seed = args.seed + 1000 * r  # each round its own trace variations and probe arrivals, same in both modes
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            with tempfile.TemporaryDirectory(prefix="blink-bench-precompute-") as tmp:
                port = free_port()
                t0 = time.perf_counter()
                proc = start_server(model, port, Path(tmp), server_cores, mode == "on", args)
                try:
                    print(f"round {r + 1}/{args.rounds}: pre-computation {mode} ...", flush=True)
                    turns, probe_ttfts, metrics = asyncio.run(run_mode(port, seed, per_round, args))
                finally:
                    stop(proc)
                for t in turns:
                    t.sub += 1000 * r
                runs[mode][0].extend(turns)
                runs[mode][1].extend(probe_ttfts)
                runs[mode] = (runs[mode][0], runs[mode][1], runs[mode][2] + metrics)
                print(f"  {time.perf_counter() - t0:.0f} s, {len(turns)} user turns", flush=True)
    report(runs, args)


def report(runs: dict[str, tuple[list[TurnResult], list[float], str]], args: argparse.Namespace) -> None:
    off_turns, off_probes, _ = runs["off"]
    on_turns, on_probes, metrics = runs["on"]
    n = len(on_turns)
    print(f"\ntrace: seed {args.seed}, {args.conversations} conversations a variation, {n} user turns, {args.users} "
          f"users at once, max_tokens {args.max_tokens}, {args.rounds} alternating rounds; probes at "
          f"{args.probe_rate}/s ({len(off_probes)} off, {len(on_probes)} on)")
    for mode, (turns, _, _) in runs.items():
        outcomes = {o: sum(t.cache == o for t in turns) for o in ("exact", "semantic", "miss")}
        print(f"pre-computation {mode:3}: cache outcomes {outcomes}")
    pre = [t for t in on_turns if t.precomputed == "predict"]
    later = [t for t in on_turns if t.index > 0]
    print(f"SHARE of user turns answered from pre-computed entries: {len(pre)}/{n} = {len(pre) / max(1, n):.1%} "
          f"(of follow-up turns: {len(pre)}/{len(later)} = {len(pre) / max(1, len(later)):.1%})")
    same = {(t.sub, t.cid, t.index): t for t in off_turns}
    pairs = [(t.ttft_ms, same[(t.sub, t.cid, t.index)].ttft_ms) for t in pre if (t.sub, t.cid, t.index) in same]
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
    jobs = scrape_sum(metrics, "blink_precompute_jobs_total")
    tokens = scrape_sum(metrics, "blink_precompute_tokens_total")
    skipped = scrape_sum(metrics, "blink_precompute_skipped_total")
    print(f"pre-computation jobs {jobs}; skipped {skipped}; tokens spent idle {sum(tokens.values()):.0f}")
    ratio = pct(on_probes, 99) / pct(off_probes, 99)
    low, high = bootstrap_ratio(on_probes, off_probes, args.seed)
    print(f"RATIO interactive p99 TTFT with the idle lane on / off: {ratio:.2f}x (bootstrap 95% interval "
          f"{low:.2f}-{high:.2f}x; goal <= 1.05) {'PASS' if ratio <= 1.05 else 'MISS'}")


def bootstrap_ratio(on: list[float], off: list[float], seed: int, n: int = 2000) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of p99(on) / p99(off) over resamples of both sets."""
    rng = random.Random(seed)
    ratios = sorted(pct(rng.choices(on, k=len(on)), 99) / pct(rng.choices(off, k=len(off)), 99) for _ in range(n))
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


if __name__ == "__main__":
    print(cpu_line(), flush=True)
    main()
