"""What does Blink's whole request path add? Side by side: direct, nginx, Blink — in one run.

The upstream is the local fake (``tests/upstream_server.py``): 32 tokens, no delay. Blink serves
a routed model (router + breaker + retry machinery) with API keys, a rate limit (high enough
never to bite) and the exact cache on (every prompt is new: a miss, then a fill). nginx (the
Debian package) is a plain streaming reverse proxy (``proxy_buffering off``, upstream
keep-alive, one worker). Each proxy is pinned to the same one core; the upstream and this load
generator share the other core(s). Prints, per path: TTFT p50/p99 at concurrency 1, what the
proxy adds, CPU-seconds per 1,000 streamed requests and streamed requests/s at concurrency 64.

Concurrency 1 is measured interleaved: blocks of ``BLOCK`` requests to each path in turn (the
order reversed every round), so the machine's drift (up to 1.5x minute to minute on a shared
VM) lands on every path alike and "added" compares requests taken ~0.1 s apart. Within a block
a path runs back to back as it would alone (one request per path in turn left each process cold
and read ~0.5 ms more for a Python gateway); the first ``BLOCK_WARM`` of each block are not
counted. Concurrency 64 runs one path after another. At concurrency 1, ``blink`` and ``blink-nr`` share one process: their CPU column
is that process's CPU over both paths' requests.

    apt-get install -y --no-install-recommends nginx   # once (Debian package)
    python benchmarks/gateway_overhead.py [--requests 400] [--requests-c64 2000] [--before DIR] [--quick]

The ``blink-rs`` path sends ``blink-nr``'s request through ``POST /v1/responses`` (stored, as by
default), so its ``+p50`` minus ``blink-nr``'s is what the Responses API adds over chat completions.

``--before DIR`` (a checkout of an earlier commit, e.g. ``git worktree add /tmp/before SHA``)
adds that checkout's gateway as one more path, pinned to the same core and measured in the same
run, and prints this checkout's figures as ratios of it.

Anchors from the issue (measured elsewhere): LiteLLM +15 ms TTFT p50, 37.5 CPU-s / 1k requests;
nginx +0.2 ms, 0.10 CPU-s / 1k. Goals: +0.5 ms p50, +2 ms p99, <= 1.5 CPU-s / 1k, >= 600 req/s.

``blink-msg`` is Anthropic's ``/v1/messages`` on the same gateway and upstream model as ``blink-nr``
(the same body: its fields are valid in both APIs), translated to the upstream's chat completions;
the last line prints what it adds over chat (issue #28's goal: within +0.1 ms p50).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import yaml
from _proc import cpu_seconds, free_port, pct, pinned, split_cores, stop, wait_ready

from blink.engine.cpu_features import read_cpu_features

ROOT = Path(__file__).resolve().parent.parent
FIRST_TOKEN = b'" t0"'
# LiteLLM's figures quoted in the issue, for the ratios printed at the end.
LITELLM_ADDED_P50_MS = 15.0
LITELLM_CPU_S_PER_1K = 37.5
# Concurrency-1 block per path and turn (~25-50 ms), and its requests not counted (caches warm up).
BLOCK = 25
BLOCK_WARM = 3

NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  upstream fake {{ server 127.0.0.1:{up}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://fake;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"""


async def one(client: aiohttp.ClientSession, url: str, body: dict[str, object], headers: dict[str, str]) -> float:
    t0 = time.perf_counter()
    ttft = 0.0
    seen = b""
    async with client.post(url, data=orjson.dumps(body), headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {await resp.read()!r}")
        async for chunk in resp.content.iter_any():
            if not ttft:
                seen += chunk
                if FIRST_TOKEN in seen:
                    ttft = time.perf_counter() - t0
    if not ttft:
        raise RuntimeError(f"no first token from {url}: {seen[:300]!r}")
    return ttft * 1000


def make_body(model: str, counter: Iterator[int], url: str = "") -> dict[str, object]:
    # A new prompt every time: the exact cache misses (and fills) on every request.
    n = next(counter)
    if url.endswith("/v1/responses"):  # the same request in the Responses API (stored, as by default)
        return {"model": model, "input": f"hi {os.getpid()} {n}", "stream": True, "temperature": 0,
                "max_output_tokens": 32}
    return {"model": model, "messages": [{"role": "user", "content": f"hi {os.getpid()} {n}"}],
            "stream": True, "temperature": 0, "max_tokens": 32}  # fmt: skip


async def drive_interleaved(
    targets: dict[str, tuple[str, str]], key: str, requests: int, counter: Iterator[int]
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Concurrency 1 on every path (name -> (url, model)): blocks of ``BLOCK`` requests per path in
    turn, the order reversed each round, until each has ``requests`` counted. Returns TTFTs (ms)
    and errors per path."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    names = list(targets)
    ttfts: dict[str, list[float]] = {n: [] for n in names}
    errors = dict.fromkeys(names, 0)
    clients = {n: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1),
                                        timeout=aiohttp.ClientTimeout(total=60)) for n in names}  # fmt: skip
    try:
        for _ in range(min(20, requests)):  # warm-up: connections, caches
            for n in names:
                await one(clients[n], targets[n][0], make_body(targets[n][1], counter, targets[n][0]), headers)
        per_block = BLOCK - BLOCK_WARM
        for i in range(-(-requests // per_block)):
            for n in names if i % 2 == 0 else reversed(names):
                url, model = targets[n]
                for k in range(BLOCK_WARM + min(per_block, requests - i * per_block)):
                    try:
                        ttft = await one(clients[n], url, make_body(model, counter, url), headers)
                    except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                        errors[n] += 1
                        if errors[n] == 1:
                            print(f"  first error ({n}): {exc!r}", flush=True)
                        continue
                    if k >= BLOCK_WARM:
                        ttfts[n].append(ttft)
    finally:
        for c in clients.values():
            await c.close()
    return ttfts, errors


async def drive(
    url: str, model: str, key: str, concurrency: int, requests: int, counter: Iterator[int]
) -> tuple[list[float], float, int]:
    """(TTFTs in ms, wall seconds, errors) for ``requests`` streamed chats at ``concurrency``.

    The client is aiohttp: httpx spends ~5x more CPU per streamed request, and this load
    generator shares its core with the upstream."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}

    def body() -> dict[str, object]:
        return make_body(model, counter, url)

    ttfts: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:
        for _ in range(min(20, requests)):  # warm-up: connections, caches
            await one(client, url, body(), headers)
        left = requests
        t0 = time.perf_counter()

        async def worker() -> None:
            nonlocal left, errors
            while left > 0:
                left -= 1
                try:
                    ttfts.append(await one(client, url, body(), headers))
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                    errors += 1
                    if errors == 1:
                        print(f"  first error: {exc!r}", flush=True)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return ttfts, wall, errors


def blink_config(tmp: Path, up_port: int, port: int) -> Path:
    config = {
        "server": {"port": port, "max_concurrent_streams": 4096, "log_level": "warning"},
        "models": [{"name": "fake", "kind": "openai_http", "base_url": f"http://127.0.0.1:{up_port}/v1"}],
        "routes": [{"name": "auto", "tiers": [{"name": "main", "replicas": ["fake"]}],
                    "policies": ["explicit", "rules", "latency_budget"]}],
        "auth": {"enabled": True, "keys_db": str(tmp / "keys.db")},
        # Far above what this run sends: the limiter is on the path but never says no.
        "ratelimit": {"requests_per_minute": 100_000_000},
        "cache": {"exact": {"enabled": True}, "store": "sqlite", "path": str(tmp / "cache.db")},
        "responses": {"path": str(tmp / "responses.db")},
    }  # fmt: skip
    path = tmp / "blink.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="requests at concurrency 1, per path")
    ap.add_argument("--requests-c64", type=int, default=2000, help="requests at concurrency 64, per path")
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit: its gateway is one more path")
    ap.add_argument("--quick", action="store_true", help="a short run that proves the script works (no figures)")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.requests_c64 = 44, 200
    if shutil.which("nginx") is None:
        sys.exit("nginx is not installed: apt-get install -y --no-install-recommends nginx")
    proxy_core, other_cores = split_cores()
    if other_cores:
        os.sched_setaffinity(0, other_cores)  # this load generator
    tmp = Path(tempfile.mkdtemp(prefix="blink-overhead-"))
    up_port, nginx_port, blink_port, before_port = free_port(), free_port(), free_port(), free_port()
    cli = [sys.executable, "-m", "blink.cli"]
    key = subprocess.run([*cli, "keys", "create", "--db", str(tmp / "keys.db")], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(dir=tmp, up=up_port, port=nginx_port))
    up = subprocess.Popen([sys.executable, str(ROOT / "tests/upstream_server.py"), "--port", str(up_port),
                           "--tokens", "32"], preexec_fn=pinned(other_cores))  # fmt: skip
    nginx = subprocess.Popen(["nginx", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], preexec_fn=pinned(proxy_core))
    log = (tmp / "blink.log").open("wb")  # the JSON request log goes here, not to the terminal
    blink = subprocess.Popen([*cli, "serve", "--config", str(blink_config(tmp, up_port, blink_port))], cwd=ROOT,
                             preexec_fn=pinned(proxy_core), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    procs = [blink, nginx, up]
    before: subprocess.Popen[bytes] | None = None
    if args.before is not None:  # `python -m` from its directory imports that checkout's blink
        (tmp / "before").mkdir()
        shutil.copy(tmp / "keys.db", tmp / "before" / "keys.db")
        before = subprocess.Popen([*cli, "serve", "--config", str(blink_config(tmp / "before", up_port, before_port))],
                                  cwd=args.before, preexec_fn=pinned(proxy_core), stdout=log,
                                  stderr=subprocess.STDOUT)  # fmt: skip
        procs.insert(0, before)
    try:
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", up)
        wait_ready(f"http://127.0.0.1:{nginx_port}/v1/models", nginx)
        wait_ready(f"http://127.0.0.1:{blink_port}/health", blink)
        if before is not None:
            wait_ready(f"http://127.0.0.1:{before_port}/health", before)
        print(f"cores: proxies {proxy_core or 'any'}; upstream + load generator {other_cores or 'any'}")
        print(f"CPU: {read_cpu_features().describe()}")
        # "blink" asks for the routed model; "blink-nr" for the upstream model itself (same auth, rate
        # limit, cache; no router/breaker): the difference is what routing and resilience cost.
        # "blink-rs": blink-nr's request through POST /v1/responses (translated to the same chat upstream call).
        paths = {"direct": (up_port, None), "nginx": (nginx_port, nginx.pid), "blink-nr": (blink_port, blink.pid),
                 "blink": (blink_port, blink.pid), "blink-msg": (blink_port, blink.pid),
                 "blink-rs": (blink_port, blink.pid)}  # fmt: skip
        if before is not None:
            paths["before"] = (before_port, before.pid)
        rows: dict[str, dict[str, float]] = {name: {} for name in paths}
        counter = itertools.count()  # one prompt number sequence for the whole run: no prompt repeats
        url = "http://127.0.0.1:{}/v1/chat/completions".format
        # "blink"/"before" ask for the routed model; the fake upstream ignores the model.
        targets = {name: (url(port), "auto" if name in ("blink", "before") else "fake") for name, (port, _) in paths.items()}
        targets["blink-msg"] = (f"http://127.0.0.1:{blink_port}/v1/messages", "fake")
        targets["blink-rs"] = (f"http://127.0.0.1:{blink_port}/v1/responses", "fake")
        pids = {pid for _, pid in paths.values() if pid}
        cpu0 = {pid: cpu_seconds(pid) for pid in pids}
        ttfts, errors = asyncio.run(drive_interleaved(targets, key, args.requests, counter))
        blocks = -(-args.requests // (BLOCK - BLOCK_WARM))
        served = {pid: sum(args.requests + blocks * BLOCK_WARM + min(20, args.requests) for _, p in paths.values() if p == pid)
                  for pid in pids}  # fmt: skip
        for name, (_, pid) in paths.items():
            row = rows[name]
            row["p50_1"], row["p99_1"] = pct(ttfts[name], 50), pct(ttfts[name], 99)
            row["cpu_1"] = (cpu_seconds(pid) - cpu0[pid]) / served[pid] * 1000 if pid else float("nan")
            row["err_1"] = errors[name]
        for name, (_, pid) in paths.items():
            row = rows[name]
            cpu0_64 = cpu_seconds(pid) if pid else 0.0
            lat, wall, errs = asyncio.run(drive(targets[name][0], targets[name][1], key, 64, args.requests_c64, counter))
            cpu = (cpu_seconds(pid) - cpu0_64) if pid else float("nan")
            row["p50_64"], row["p99_64"] = pct(lat, 50), pct(lat, 99)
            row["rps_64"] = len(lat) / wall
            row["cpu_64"] = cpu / (args.requests_c64 + min(20, args.requests_c64)) * 1000
            row["err_64"] = errs
        d = rows["direct"]
        print(f"{'path':<8}{'TTFT p50':>9}{'p99':>8}{'+p50':>8}{'+p99':>8}{'CPU-s/1k':>10}"
              f"{'c64 p50':>9}{'c64 req/s':>10}{'CPU-s/1k':>10}{'errors':>8}   (ms, concurrency 1 unless c64)")  # fmt: skip
        for name, r in rows.items():
            added = (r["p50_1"] - d["p50_1"], r["p99_1"] - d["p99_1"])
            print(f"{name:<8}{r['p50_1']:>9.2f}{r['p99_1']:>8.2f}{added[0]:>8.2f}{added[1]:>8.2f}{r['cpu_1']:>10.2f}"
                  f"{r['p50_64']:>9.2f}{r['rps_64']:>10.0f}{r['cpu_64']:>10.2f}{r['err_1'] + r['err_64']:>8.0f}")  # fmt: skip
        b, g = rows["blink"], rows["nginx"]
        blink_added = b["p50_1"] - d["p50_1"]
        print(f"blink vs nginx: +TTFT p50 {blink_added:.2f} ms vs {g['p50_1'] - d['p50_1']:.2f} ms; "
              f"CPU-s/1k (c64) {b['cpu_64']:.2f} vs {g['cpu_64']:.2f} ({b['cpu_64'] / g['cpu_64']:.1f}x)")
        print(f"blink vs LiteLLM anchors: added TTFT p50 {blink_added:.2f} vs {LITELLM_ADDED_P50_MS} ms; "
              f"CPU-s/1k {b['cpu_64']:.2f} vs {LITELLM_CPU_S_PER_1K} ({LITELLM_CPU_S_PER_1K / b['cpu_64']:.1f}x less); "
              f"one-core capacity ~{1000 / b['cpu_64']:.0f} streamed req/s from CPU-s/1k")
        m, c = rows["blink-msg"], rows["blink-nr"]
        print(f"messages vs chat (same gateway, same upstream model): added TTFT p50 {m['p50_1'] - c['p50_1']:+.2f} ms "
              f"(goal: within +0.1), p99 {m['p99_1'] - c['p99_1']:+.2f} ms; CPU-s/1k (c64) {m['cpu_64']:.2f} vs "
              f"{c['cpu_64']:.2f}; c64 req/s {m['rps_64']:.0f} vs {c['rps_64']:.0f}")
        rs, nr = rows["blink-rs"], rows["blink-nr"]
        print(f"/v1/responses vs /v1/chat/completions (same upstream, same model): TTFT p50 "
              f"{rs['p50_1'] - nr['p50_1']:+.2f} ms, p99 {rs['p99_1'] - nr['p99_1']:+.2f} ms (goal: within +0.1 ms p50); "
              f"c64 CPU-s/1k {rs['cpu_64']:.2f} vs {nr['cpu_64']:.2f}")
        if before is not None:
            o = rows["before"]
            print(f"blink now vs before ({args.before}): added TTFT p50 {blink_added:.2f} vs "
                  f"{o['p50_1'] - d['p50_1']:.2f} ms, p99 {b['p99_1'] - d['p99_1']:.2f} vs {o['p99_1'] - d['p99_1']:.2f} ms; "
                  f"CPU-s/1k (c64) {b['cpu_64']:.2f} vs {o['cpu_64']:.2f} ({o['cpu_64'] / b['cpu_64']:.2f}x less); "
                  f"c64 req/s {b['rps_64']:.0f} vs {o['rps_64']:.0f} ({b['rps_64'] / o['rps_64']:.2f}x)")
    finally:
        stop(*procs)


if __name__ == "__main__":
    main()
