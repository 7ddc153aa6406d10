"""Scale-out figures (issue #8), in one run of under 3 minutes on this machine:

1. Throughput and p99 TTFT through one gateway in front of 1, 2 and 4 ``blink engine serve``
   replicas (the offline demo model, 1 engine thread each, replica i pinned to core i mod N),
   under the same closed-loop streaming load. The ratios are against 1 replica, measured in
   the same run. On a 2-core machine expect the curve to flatten at 2: the engines are CPU-bound.
2. The gateway's added latency with shared stores (rate limits + exact cache in Redis, vectors
   in PostgreSQL) vs the embedded ones (in-process limits, SQLite cache), in front of the same
   fast fake upstream; baseline: the upstream asked directly. Miss path = rate limit + cache
   lookup + upstream + fill; hit path = rate limit + cache hit. Ratios are shared / embedded.

Run: ``python benchmarks/scale_out.py`` (``--quick`` halves the load durations).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _proc import free_port, pct, pinned, stop, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import PostgresServer, RedisServer  # noqa: E402

# Closed-loop load: 8 streams at once is enough to saturate 2 cores of the demo model.
CONCURRENCY = 8
MAX_TOKENS = 32
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "BLINK_OBS__REQUEST_LOG": "off"}


def spawn(args: list[str], cores: set[int] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=pinned(cores))


def start_gateway(config: dict[str, Any], tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    path = tmp / f"gw-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = spawn([sys.executable, "-m", "blink.cli", "serve", "--config", str(path), "--port", str(port),
                  "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    wait_ready(f"{url}/health", proc)
    return proc, url


async def stream_load(url: str, seconds: float) -> tuple[int, int, list[float]]:
    """(requests finished, tokens streamed, TTFTs in s) over ``seconds`` of closed-loop load."""
    done = tokens = 0
    ttfts: list[float] = []
    end = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=60) as client:

        async def worker(w: int) -> None:
            nonlocal done, tokens
            i = 0
            while time.monotonic() < end:
                body = {"model": "demo", "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0,
                        "messages": [{"role": "user", "content": f"worker {w} question {i}: tell me a story"}]}
                i += 1
                t0 = time.perf_counter()
                first = None
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {") and '"content":"' in line:
                            tokens += 1
                            if first is None:
                                first = time.perf_counter() - t0
                if first is not None and r.status_code == 200:
                    ttfts.append(first)
                    done += 1

        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return done, tokens, ttfts


def replicas_curve(seconds: float, tmp: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    engines: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for i in range(4):
            port = free_port()
            proc = spawn([sys.executable, "-m", "blink.cli", "engine", "serve", "--port", str(port), "--threads", "1",
                          "--served-model-name", "demo", "--log-level", "warning"], {cores[i % len(cores)]})
            engines.append((proc, f"http://127.0.0.1:{port}"))
        for proc, url in engines:
            wait_ready(f"{url}/health", proc, timeout=150)
        print(f"\n1) {CONCURRENCY} concurrent streams, {MAX_TOKENS} tokens each, {seconds:.0f} s per point, "
              f"{len(cores)} cores; engine replicas pinned round-robin")
        print(f"{'replicas':>8} {'req/s':>7} {'tok/s':>7} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} "
              f"{'req/s vs 1':>10} {'p99 vs 1':>9}")
        base: tuple[float, float] | None = None
        for n in (1, 2, 4):
            urls = [f"{u}/v1" for _, u in engines[:n]]
            config = {"models": [{"name": "demo", "kind": "openai_http", "base_url": urls[0], "upstream_model": "demo",
                                  "discovery": {"replicas": urls[1:]}}]}
            gw, gw_url = start_gateway(config, tmp)
            try:
                asyncio.run(stream_load(gw_url, 2.0))  # warm-up
                done, toks, ttfts = asyncio.run(stream_load(gw_url, seconds))
            finally:
                stop(gw)
            rps, p50, p99 = done / seconds, pct(ttfts, 50) * 1000, pct(ttfts, 99) * 1000
            base = base or (rps, p99)
            print(f"{n:>8} {rps:>7.2f} {toks / seconds:>7.1f} {p50:>12.1f} {p99:>12.1f} "
                  f"{rps / base[0]:>9.2f}x {p99 / base[1]:>8.2f}x")
    finally:
        stop(*(p for p, _ in engines))


async def latencies(urls: dict[str, str], n: int, hit: bool) -> dict[str, list[float]]:
    """Sequential requests, one to each target in turn, so every target sees the same noise."""
    out: dict[str, list[float]] = {name: [] for name in urls}
    async with httpx.AsyncClient(timeout=30) as client:
        fixed = f"the cached question {uuid.uuid4()}"
        if hit:  # fill it first (the fill lands just after the response)
            for url in urls.values():
                await client.post(f"{url}/v1/chat/completions", json=_body(fixed))
            await asyncio.sleep(0.3)
        for i in range(n):
            for name, url in urls.items():
                t0 = time.perf_counter()
                r = await client.post(f"{url}/v1/chat/completions",
                                      json=_body(fixed if hit else f"q {uuid.uuid4()} {i}"))
                out[name].append(time.perf_counter() - t0)
                if r.status_code != 200 or (hit and r.headers.get("x-blink-cache") != "exact"):
                    raise RuntimeError(f"{url}: {r.status_code} cache={r.headers.get('x-blink-cache')}")
    return out


def _body(question: str) -> dict[str, Any]:
    return {"model": "fake", "temperature": 0, "messages": [{"role": "user", "content": question}]}


def store_latency(n: int, tmp: Path) -> None:
    up_port = free_port()
    upstream = spawn([sys.executable, str(ROOT / "tests" / "upstream_server.py"), "--port", str(up_port),
                      "--tokens", "8"])
    up = f"http://127.0.0.1:{up_port}"
    procs = [upstream]
    try:
        wait_ready(f"{up}/v1/models", upstream)
        with RedisServer() as redis, PostgresServer() as pg:
            model = [{"name": "fake", "kind": "openai_http", "base_url": f"{up}/v1"}]
            # A limit that is never reached: the point is what checking it costs.
            limit = {"requests_per_minute": 1_000_000}
            embedded = {"models": model, "ratelimit": limit,
                        "cache": {"exact": {"enabled": True}, "store": "sqlite", "path": str(tmp / "cache.db")}}
            redis_limits = {**limit, "storage_uri": redis.url, "timeout_s": 1.0}
            redis_cache = {"exact": {"enabled": True}, "store": "redis", "redis_url": redis.url,
                           "postgres_dsn": pg.dsn, "store_timeout_s": 1.0}
            shared = {"models": model, "ratelimit": redis_limits, "cache": redis_cache}
            # The two halves apart, to show which one costs what.
            cache_only = {**embedded, "cache": redis_cache}
            limits_only = {**embedded, "ratelimit": redis_limits}
            gws = {}
            for name, cfg in (("embedded", embedded), ("shared", shared), ("cache", cache_only),
                              ("limits", limits_only)):
                proc, url = start_gateway(cfg, tmp)
                procs.append(proc)
                gws[name] = url
            asyncio.run(latencies({"direct": up, **gws}, 20, False))  # warm-up
            miss = asyncio.run(latencies({"direct": up, **gws}, n, False))
            hit = asyncio.run(latencies(gws, n, True))
            d50 = pct(miss["direct"], 50) * 1000
            print(f"\n2) gateway latency, {n} sequential non-streamed requests per row, targets interleaved "
                  f"(direct upstream: p50 {d50:.2f} ms, p99 {pct(miss['direct'], 99) * 1000:.2f} ms)")
            print("(cache = only the cache in Redis + pgvector; limits = only the rate limits in Redis)")
            print(f"{'stores':>9} {'miss p50 added':>15} {'miss p99':>9} {'hit p50':>8} {'hit p99':>8}")
            for name in gws:
                print(f"{name:>9} {pct(miss[name], 50) * 1000 - d50:>12.2f} ms {pct(miss[name], 99) * 1000:>6.2f} ms "
                      f"{pct(hit[name], 50) * 1000:>5.2f} ms {pct(hit[name], 99) * 1000:>5.2f} ms")
            em, sm, eh, sh = miss["embedded"], miss["shared"], hit["embedded"], hit["shared"]
            added_e, added_s = pct(em, 50) * 1000 - d50, pct(sm, 50) * 1000 - d50
            print(f"ratios shared/embedded: miss added p50 {added_s / added_e:.2f}x, miss p99 "
                  f"{pct(sm, 99) / pct(em, 99):.2f}x, hit p50 {pct(sh, 50) / pct(eh, 50):.2f}x, "
                  f"hit p99 {pct(sh, 99) / pct(eh, 99):.2f}x")
    finally:
        stop(*procs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="half the load durations")
    ap.add_argument("--skip-replicas", action="store_true")
    ap.add_argument("--skip-stores", action="store_true")
    args = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="blink-scale-") as d:
        if not args.skip_replicas:
            replicas_curve(6.0 if args.quick else 12.0, Path(d))
        if not args.skip_stores:
            store_latency(100 if args.quick else 200, Path(d))
    print(f"\n(total {time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
