"""Load shedding at 3x capacity: admitted requests keep their TTFT, the rest get a fast 503.

The upstream (``tests/upstream_server.py``) streams 32 tokens 5 ms apart (~165 ms a request).
Blink fronts it with a routed model whose tier admits ``--slots`` requests at once and queues a
few more; its capacity is slots / unloaded request time. Phase 1 measures unloaded TTFT (one
request at a time); phase 2 offers 3x capacity, open loop, for ``--duration`` seconds, each
request carrying ``x-blink-latency-budget-ms`` = the unloaded p99 TTFT (what a voice client
would send). Prints admitted p99 TTFT against 2x the unloaded p99, 503 latency (goal < 5 ms),
errors of any other kind (goal 0) and Blink's RSS over the run (goal: flat). Blink is pinned to
one core; the upstream and this load generator to the other(s).

    python benchmarks/overload.py [--duration 60] [--slots 8] [--factor 3]
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

import orjson
import yaml
from _proc import free_port, pct, pinned, rss_bytes, split_cores, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
FIRST_TOKEN = b'" t0"'
# 5 ms between tokens: a ~200 tokens/s stream, typical of a GPU-served 7B model.
TOKEN_DELAY_S = 0.005


class Outcome:
    __slots__ = ("status", "head_ms", "ttft_ms", "complete", "error")

    def __init__(self) -> None:
        self.status = 0
        self.head_ms = 0.0
        self.ttft_ms: float | None = None
        self.complete = False
        self.error = ""


async def one(port: int, headers: dict[str, str], body: bytes) -> Outcome:
    """One request on its own connection (``connection: close``), read with bare asyncio streams:
    httpx costs this load generator more CPU than the gateway spends, which would skew the run."""
    out = Outcome()
    t0 = time.perf_counter()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
               f"content-length: {len(body)}\r\n{head}\r\n").encode() + body  # fmt: skip
    seen = b""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        while chunk := await reader.read(65536):
            seen += chunk
            if not out.status and b"\r\n" in seen:
                out.status = int(seen.split(b" ", 2)[1])
                out.head_ms = (time.perf_counter() - t0) * 1000
            if out.ttft_ms is None and FIRST_TOKEN in seen:
                out.ttft_ms = (time.perf_counter() - t0) * 1000
        writer.close()
        out.complete = out.status == 200 and b"data: [DONE]" in seen and b'"error"' not in seen
    except (OSError, ValueError, IndexError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


async def run_phase(port: int, rate: float, duration: float, budget_ms: float | None, pid: int) -> tuple[list[Outcome], list[int]]:
    headers = {"content-type": "application/json"}
    if budget_ms is not None:
        headers["x-blink-latency-budget-ms"] = f"{budget_ms:.1f}"
    body = orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    tasks: list[asyncio.Task[Outcome]] = []
    rss: list[int] = []
    t0 = time.perf_counter()
    n = 0
    next_rss = t0
    while (now := time.perf_counter()) - t0 < duration:
        due = t0 + n / rate  # open loop: arrivals on a fixed schedule, whatever the answers
        if now >= due:
            tasks.append(asyncio.ensure_future(one(port, headers, body)))
            n += 1
            continue
        if now >= next_rss:
            rss.append(rss_bytes(pid))
            next_rss = now + 5.0
        await asyncio.sleep(min(due - now, 0.01))
    outcomes = list(await asyncio.gather(*tasks))
    rss.append(rss_bytes(pid))
    return outcomes, rss


async def unloaded(port: int, count: int) -> tuple[list[float], list[float]]:
    body = orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    ttfts, e2es = [], []
    for _ in range(count + 10):
        t0 = time.perf_counter()
        out = await one(port, {"content-type": "application/json"}, body)
        if not out.complete or out.ttft_ms is None:
            raise RuntimeError(f"unloaded request failed: {out.status} {out.error}")
        ttfts.append(out.ttft_ms)
        e2es.append((time.perf_counter() - t0) * 1000)
    return ttfts[10:], e2es[10:]  # the first ten warm the server up


def server_side(log: Path) -> dict[str, list[float]]:
    """Blink's own timings from its JSON request log (free of the load generator's scheduling lag)."""
    ttft: list[float] = []
    shed: list[float] = []
    for line in log.read_bytes().splitlines():
        if not line.startswith(b"{"):
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if rec.get("event") != "request":
            continue
        if rec.get("status") == 200 and rec.get("ttft_ms") is not None:
            ttft.append(float(rec["ttft_ms"]))
        elif rec.get("status") == 503 and rec.get("total_ms") is not None:
            shed.append(float(rec["total_ms"]))
    return {"ttft": ttft, "shed": shed} if ttft or shed else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--slots", type=int, default=8, help="requests the tier serves at once")
    ap.add_argument("--queue", type=int, default=8, help="requests it may queue beyond that")
    ap.add_argument("--factor", type=float, default=3.0, help="offered load / capacity")
    args = ap.parse_args()
    blink_core, other_cores = split_cores()
    if other_cores:
        os.sched_setaffinity(0, other_cores)
    tmp = Path(tempfile.mkdtemp(prefix="blink-overload-"))
    up_port, port = free_port(), free_port()
    config = {
        "server": {"port": port, "max_concurrent_streams": 8192, "log_level": "warning"},
        "models": [{"name": "fake", "kind": "openai_http", "base_url": f"http://127.0.0.1:{up_port}/v1"}],
        "routes": [{"name": "auto", "tiers": [{"name": "main", "replicas": ["fake"], "max_concurrency": args.slots,
                                               "max_queue": args.queue}]}],
    }  # fmt: skip
    (tmp / "blink.yaml").write_text(yaml.safe_dump(config))
    up = subprocess.Popen([sys.executable, str(ROOT / "tests/upstream_server.py"), "--port", str(up_port),
                           "--tokens", "32", "--delay", str(TOKEN_DELAY_S)], preexec_fn=pinned(other_cores))  # fmt: skip
    log = (tmp / "blink.log").open("wb")
    blink = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(tmp / "blink.yaml")],
                             cwd=ROOT, preexec_fn=pinned(blink_core), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", up)
        wait_ready(f"http://127.0.0.1:{port}/health", blink)
        ttfts, e2es = asyncio.run(unloaded(port, 100))
        base_p99 = pct(ttfts, 99)
        capacity = args.slots / (sum(e2es) / len(e2es) / 1000)
        rate = args.factor * capacity
        print(f"cores: blink {blink_core or 'any'}; upstream + load generator {other_cores or 'any'}")
        print(f"unloaded: TTFT p50 {pct(ttfts, 50):.2f} ms, p99 {base_p99:.2f} ms; request {pct(e2es, 50):.0f} ms; "
              f"capacity {capacity:.1f} req/s ({args.slots} slots)")  # fmt: skip
        print(f"offering {rate:.1f} req/s ({args.factor:g}x) for {args.duration:g} s, budget {base_p99:.1f} ms ...", flush=True)
        outcomes, rss = asyncio.run(run_phase(port, rate, args.duration, base_p99, blink.pid))
        admitted = [o for o in outcomes if o.status == 200]
        rejected = [o for o in outcomes if o.status == 503]
        other = [o for o in outcomes if o.status not in (200, 503) or o.error or (o.status == 200 and not o.complete)]
        adm_ttft = [o.ttft_ms for o in admitted if o.ttft_ms is not None]
        rej_ms = [o.head_ms for o in rejected]
        print(f"requests {len(outcomes)}: admitted {len(admitted)} ({len(admitted) / args.duration:.1f}/s), "
              f"rejected 503 {len(rejected)}, other errors {len(other)}")  # fmt: skip
        print(f"admitted TTFT p50 {pct(adm_ttft, 50):.2f} ms, p99 {pct(adm_ttft, 99):.2f} ms "
              f"= {pct(adm_ttft, 99) / base_p99:.2f}x unloaded p99 (goal <= 2x)")  # fmt: skip
        print(f"503 latency p50 {pct(rej_ms, 50):.2f} ms, p99 {pct(rej_ms, 99):.2f} ms, max {max(rej_ms, default=0):.2f} ms "
              f"(goal < 5 ms)")  # fmt: skip
        server = server_side(tmp / "blink.log")
        if server:
            print(f"server-side (request log): admitted TTFT p99 {pct(server['ttft'], 99):.2f} ms; "
                  f"503 answered in p50 {pct(server['shed'], 50):.2f} ms, p99 {pct(server['shed'], 99):.2f} ms")  # fmt: skip
        mib = [r / 2**20 for r in rss]
        print(f"blink RSS MiB over the run: {' '.join(f'{m:.0f}' for m in mib)} (growth {mib[-1] - mib[0]:+.1f} MiB)")
        if other:
            print("first other error:", other[0].status, other[0].error or "incomplete stream")
    finally:
        stop(blink, up)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
