"""/v1/embeddings with dynamic batching on vs off, side by side in one run.

Two Blink servers with the same ONNX encoder (all-MiniLM-L6-v2, the semantic cache's int8 export
unless --fp32), one batching (``max_batch_size`` 32, 2 ms window) and one not (``max_batch_size``
1), both pinned to the same one core and loaded one at a time; this aiohttp load generator runs
on the other core(s). Each request embeds one short sentence. Prints requests/s and latency
p50/p99 at concurrency 1, 16 and 64 per server, and the throughput ratio on/off.

    python benchmarks/embeddings.py [--requests 300] [--fp32]

Goal (issue #9): >= 3x throughput at concurrency 16 with p99 <= 20 ms, on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import yaml
from _proc import free_port, pct, pinned, split_cores, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [
    "How do I reset my password?", "What time does the store open on Sundays?",
    "Summarise the meeting notes from yesterday.", "Is it going to rain in Paris tomorrow?",
    "Translate 'good morning' into Spanish.", "Which plan includes priority support?",
]  # fmt: skip
CONCURRENCY = (1, 16, 64)


def config(tmp: Path, port: int, max_batch: int, fp32: bool) -> Path:
    cfg = {
        "server": {"port": port, "log_level": "warning"},
        # No generation in this benchmark: the model entry only satisfies the config.
        "models": [{"name": "none", "kind": "openai_http", "base_url": "http://127.0.0.1:9/v1"}],
        "cache": {"semantic": {"onnx_dir": str(tmp / "onnx"), "quantize": not fp32}},
        "model_server": {"embeddings": True, "max_batch_size": max_batch, "batch_window_ms": 2.0},
        "obs": {"request_log": "off"},
    }
    path = tmp / f"blink-{max_batch}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def drive(url: str, concurrency: int, requests: int) -> tuple[list[float], float, int]:
    """(latencies ms, wall seconds, errors) for ``requests`` one-sentence embedding calls."""
    lat: list[float] = []
    errors, left = 0, requests
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=30)) as client:

        async def one(i: int) -> float:
            body = orjson.dumps({"input": f"{SENTENCES[i % len(SENTENCES)]} ({i})"})
            t0 = time.perf_counter()
            async with client.post(url, data=body, headers={"content-type": "application/json"}) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
            return (time.perf_counter() - t0) * 1000

        for i in range(min(20, requests)):  # warm-up
            await one(i)
        t0 = time.perf_counter()

        async def worker() -> None:
            nonlocal left, errors
            while left > 0:
                left -= 1
                try:
                    lat.append(await one(left))
                except (aiohttp.ClientError, TimeoutError, RuntimeError):
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return lat, time.perf_counter() - t0, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300, help="requests per concurrency level at concurrency 1 (x4 above)")
    ap.add_argument("--fp32", action="store_true", help="the fp32 encoder instead of the per-channel int8 one")
    args = ap.parse_args()
    server_core, other = split_cores()
    if other:
        os.sched_setaffinity(0, other)
    tmp = Path(tempfile.mkdtemp(prefix="blink-embed-"))
    cli = [sys.executable, "-m", "blink.cli", "serve", "--config"]
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, max_batch in (("batching", 32), ("no-batching", 1)):  # one after the other: one ONNX export
            port = free_port()
            proc = subprocess.Popen([*cli, str(config(tmp, port, max_batch, args.fp32))], cwd=ROOT,
                                    preexec_fn=pinned(server_core), stdout=subprocess.DEVNULL)  # fmt: skip
            procs[name] = (proc, port)
            wait_ready(f"http://127.0.0.1:{port}/health", proc, timeout=180)
        print(f"cores: servers {server_core or 'any'}; load generator {other or 'any'}; "
              f"encoder {'fp32' if args.fp32 else 'int8'}")
        rows: dict[tuple[str, int], tuple[float, float, float, int]] = {}
        for conc in CONCURRENCY:
            n = args.requests if conc == 1 else args.requests * 4
            for name, (_, port) in procs.items():
                lat, wall, errors = asyncio.run(drive(f"http://127.0.0.1:{port}/v1/embeddings", conc, n))
                rows[name, conc] = (len(lat) / wall, pct(lat, 50), pct(lat, 99), errors)
        print(f"{'server':<13}{'conc':>5}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
        for (name, conc), (rps, p50, p99, err) in rows.items():
            print(f"{name:<13}{conc:>5}{rps:>9.0f}{p50:>9.2f}{p99:>9.2f}{err:>8}")
        for conc in CONCURRENCY:
            on, off = rows["batching", conc], rows["no-batching", conc]
            print(f"concurrency {conc:>2}: batching on/off throughput {on[0] / off[0]:.2f}x, "
                  f"p99 {on[2]:.2f} vs {off[2]:.2f} ms")
        on16 = rows["batching", 16]
        print(f"goal at concurrency 16: >= 3x throughput -> {rows['batching', 16][0] / rows['no-batching', 16][0]:.2f}x; "
              f"p99 <= 20 ms -> {on16[2]:.2f} ms")
    finally:
        stop(*(p for p, _ in procs.values()))


if __name__ == "__main__":
    main()
