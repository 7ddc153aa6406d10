"""What does Blink add on top of the upstream it fronts? TTFT, end-to-end latency and CPU.

Starts the local fake upstream (``tests/upstream_server.py``, 32 tokens, no delay) and
``blink serve --upstream`` in front of it, then drives 32-token chat streams at concurrency 1
and 64, directly against the upstream and through Blink, in one run. Blink is pinned to one
core, the upstream and the load generator to another (when the machine has two or more).
Prints p50/p99 TTFT and E2E for both paths, what Blink adds, and Blink's CPU-seconds per
1,000 requests (psutil on the server PID). Runs in well under two minutes.

    python benchmarks/server_overhead.py [--requests 300] [--requests-c64 1280]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import psutil
from _proc import free_port, pct, pinned, wait_ready

ROOT = Path(__file__).resolve().parent.parent
FIRST_TOKEN = b'" t0"'


async def one(client: httpx.AsyncClient, url: str, body: bytes) -> tuple[float, float]:
    t0 = time.perf_counter()
    ttft = 0.0
    seen = b""
    async with client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {await resp.aread()!r}")
        async for chunk in resp.aiter_raw():
            if not ttft:
                seen += chunk
                if FIRST_TOKEN in seen:
                    ttft = time.perf_counter() - t0
    return ttft * 1000, (time.perf_counter() - t0) * 1000


async def drive(base: str, concurrency: int, requests: int, tokens: int) -> tuple[list[float], list[float], int]:
    body = orjson.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                         "max_tokens": tokens})
    url = f"{base}/chat/completions"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    ttfts: list[float] = []
    e2es: list[float] = []
    errors = 0
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        for _ in range(min(20, requests)):  # warm-up: connections, caches
            await one(client, url, body)
        remaining = requests

        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                try:
                    ttft, e2e = await one(client, url, body)
                except (httpx.HTTPError, RuntimeError):
                    errors += 1
                    continue
                ttfts.append(ttft)
                e2es.append(e2e)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ttfts, e2es, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300, help="requests at concurrency 1")
    ap.add_argument("--requests-c64", type=int, default=1280, help="requests at concurrency 64")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    server_cores = {cores[-1]} if len(cores) > 1 else None
    other_cores = set(cores[:-1]) if len(cores) > 1 else None
    if other_cores:
        os.sched_setaffinity(0, other_cores)  # the load generator

    up_port, blink_port = free_port(), free_port()
    up = subprocess.Popen([sys.executable, str(ROOT / "tests/upstream_server.py"), "--port", str(up_port),
                           "--tokens", str(args.tokens)], preexec_fn=pinned(other_cores))
    blink = subprocess.Popen(
        [sys.executable, "-m", "blink.cli", "serve", "--upstream", f"http://127.0.0.1:{up_port}/v1",
         "--served-model-name", "fake", "--port", str(blink_port), "--log-level", "warning",
         "--max-concurrent-streams", "1024"],
        cwd=ROOT, preexec_fn=pinned(server_cores),
    )
    try:
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", up, timeout=60)
        wait_ready(f"http://127.0.0.1:{blink_port}/ready", blink, timeout=60)
        server = psutil.Process(blink.pid)
        print(f"cores: blink {server_cores or 'any'}, upstream + load generator {other_cores or 'any'}")
        print(f"{'path':<8}{'conc':>5}{'reqs':>6}{'TTFT p50':>10}{'p99':>8}{'E2E p50':>10}{'p99':>8}"
              f"{'CPU-s/1k':>10}   (ms)")
        for conc, n in ((1, args.requests), (64, args.requests_c64)):
            results = {}
            for name, base in (("direct", f"http://127.0.0.1:{up_port}/v1"),
                               ("blink", f"http://127.0.0.1:{blink_port}/v1")):
                cpu0 = sum(server.cpu_times()[:2])
                ttfts, e2es, errors = asyncio.run(drive(base, conc, n, args.tokens))
                cpu = sum(server.cpu_times()[:2]) - cpu0
                cpu_per_k = f"{cpu / (n + min(20, n)) * 1000:.2f}" if name == "blink" else "-"
                results[name] = (pct(ttfts, 50), pct(ttfts, 99), pct(e2es, 50), pct(e2es, 99))
                r = results[name]
                print(f"{name:<8}{conc:>5}{n:>6}{r[0]:>10.2f}{r[1]:>8.2f}{r[2]:>10.2f}{r[3]:>8.2f}{cpu_per_k:>10}"
                      + (f"   {errors} errors" if errors else ""))
            d, b = results["direct"], results["blink"]
            print(f"{'added':<8}{conc:>5}{'':>6}{b[0] - d[0]:>10.2f}{b[1] - d[1]:>8.2f}{b[2] - d[2]:>10.2f}"
                  f"{b[3] - d[3]:>8.2f}   ratio TTFT p50 {b[0] / d[0]:.2f}x")
    finally:
        for proc in (blink, up):
            proc.terminate()
        for proc in (blink, up):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
