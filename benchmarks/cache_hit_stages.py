"""Where a semantic-cache hit's time goes inside ``blink serve``, stage by stage, p50 / p90 / p99.

Fills a cache like ``cache_latency.py`` (``--entries`` filler rows + the dev questions), starts a
``blink serve --semantic-cache`` gateway whose hit path is wrapped with timestamps (this script
re-runs itself with ``--instrumented``: the wrappers are installed before the CLI starts, nothing
in ``blink`` changes), pins it to one core, sends ``--requests`` guarded paraphrases from the
other core and splits each one's client-side time into:

    outside   client time minus the ASGI call: TCP, uvicorn/httptools parse, scheduling
    front     ASGI entry -> cache lookup (body, validation, mapping, auth/limits, routing)
    keys      lookup start -> embedding requested (keys, exact probe)
    to batch  the request's trip to the batcher's worker thread (queue + thread wake-up)
    model     the batch's model call (tokenise + ONNX Runtime + pooling)
    back      worker -> event loop (call_soon_threadsafe + loop wake-up)
    search    the nearest-neighbour search (HNSW past 10k rows)
    guard     the hit guard on the candidates
    replay    the cached answer's SSE body built and sent
    rest      what is left of the ASGI call (middleware before/after)

and prints each stage's percentiles and its mean over the 10 slowest requests (where a p99 comes
from), plus every garbage collection that ran while the requests were timed.

    python benchmarks/cache_hit_stages.py [--entries 100000] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_STAGES = ("outside", "front", "keys", "to batch", "model", "back", "search", "guard", "replay", "rest")


def _instrumented_serve(out: str, argv: list[str]) -> None:
    """``blink serve`` with the hit path's steps timestamped; SIGUSR1 writes them to ``out``."""
    from blink.gateway.cache import replay, semantic, stage
    from blink.gateway.cache.stores import sqlite
    from blink.modelserver import batcher

    clock = time.perf_counter
    records: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    collections: list[tuple[float, float, int]] = []
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = clock()
        else:
            collections.append((gc_start[0], clock() - gc_start[0], info["generation"]))

    gc.callbacks.append(on_gc)

    def timed(cls: Any, name: str, tag: str) -> None:
        inner = getattr(cls, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = clock()
            result = await inner(*args, **kwargs)
            current[tag] = (t, clock())
            return result

        setattr(cls, name, wrapper)

    timed(stage.ResponseCache, "lookup", "lookup")
    timed(semantic.GuardedMatcher, "embed", "embed")
    timed(sqlite.SQLiteCacheStore, "nearest", "nearest")
    execute = batcher.DynamicBatcher._execute

    def execute_timed(self: Any, batch: list[Any]) -> None:
        t = clock()
        execute(self, batch)
        current["model"] = (t, clock(), batch[0].enqueued)

    batcher.DynamicBatcher._execute = execute_timed  # type: ignore[method-assign]
    replay_call = replay.CachedReplayResponse.__call__

    async def replay_timed(self: Any, scope: Any, receive: Any, send: Any) -> None:
        t = clock()
        await replay_call(self, scope, receive, send)
        current["replay"] = (t, clock())

    replay.CachedReplayResponse.__call__ = replay_timed  # type: ignore[method-assign]

    import blink.serve

    build_app = blink.serve.build_app

    def build_timed(settings: Any) -> Any:
        app = build_app(settings)

        async def outer(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            current.clear()
            t = clock()
            await app(scope, receive, send)
            current["asgi"] = (t, clock())
            records.append(dict(current))

        return outer

    blink.serve.build_app = build_timed

    def dump(*_: Any) -> None:
        Path(out).write_text(json.dumps({"records": records, "gc": collections}))

    signal.signal(signal.SIGUSR1, dump)
    from blink.cli.main import app as cli

    sys.argv = ["blink", *argv]
    cli()


def _split(rec: dict[str, Any], client_ms: float) -> dict[str, float]:
    a0, a1 = rec["asgi"]
    l0, l1 = rec["lookup"]
    e0, e1 = rec["embed"]
    m0, m1, enqueued = rec["model"]
    n0, n1 = rec["nearest"]
    r0, r1 = rec["replay"]
    ms = 1000.0
    return {
        "outside": client_ms - (a1 - a0) * ms, "front": (l0 - a0) * ms, "keys": (e0 - l0) * ms,
        "to batch": (m0 - enqueued) * ms, "model": (m1 - m0) * ms, "back": (e1 - m1) * ms, "search": (n1 - n0) * ms,
        "guard": (l1 - n1) * ms, "replay": (r1 - r0) * ms, "rest": ((r0 - l1) + (a1 - r1)) * ms,
    }  # fmt: skip


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--instrumented":
        _instrumented_serve(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--onnx-dir", default="~/.blink/onnx")
    args = ap.parse_args()

    import cache_latency as cl
    from _proc import free_port, wait_ready


    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp = Path(tempfile.mkdtemp(prefix="blink-hit-stages-"))
    settings = cl.bench_settings(tmp, args.onnx_dir, args.entries)
    pairs = cl.load_pairs()
    _, semantic_qs = asyncio.run(cl._fill(settings, pairs, args.entries))
    cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = (cores[-1], cores[0]) if len(cores) > 1 else (None, None)
    up_port, port, dump = free_port(), free_port(), tmp / "stages.json"
    env = dict(os.environ, BLINK_CACHE__MAX_ENTRIES=str(settings.max_entries), BLINK_CACHE__PATH=settings.path,
               BLINK_CACHE__SEMANTIC__ONNX_DIR=args.onnx_dir, BLINK_OBS__REQUEST_LOG="off")  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    client_ms: list[float] = []
    try:
        procs.append(subprocess.Popen([sys.executable, str(cl.ROOT / "tests" / "upstream_server.py"), "--port",
                                       str(up_port), "--tokens", "32"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", procs[0], timeout=300)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--instrumented", str(dump), "serve", "--upstream", f"http://127.0.0.1:{up_port}/v1",
             "--upstream-model", cl.MODEL, "--port", str(port), "--semantic-cache", "--log-level", "warning"],
            cwd=cl.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        wait_ready(f"http://127.0.0.1:{port}/health", procs[1], timeout=900)
        if server_core is not None:
            cl._pin_all_threads(procs[1].pid, server_core)
            os.sched_setaffinity(0, {client_core})
        client = cl._RawClient(port)
        try:
            hits = [q for q in semantic_qs if cl._stream_ms(client, q)[1] == "semantic"]
            for i in range(args.requests):
                ms, outcome = cl._stream_ms(client, hits[i % len(hits)])
                if outcome != "semantic":
                    raise RuntimeError(f"expected a semantic hit, got {outcome}")
                client_ms.append(ms)
        finally:
            client.close()
        procs[1].send_signal(signal.SIGUSR1)
        for _ in range(100):  # the dump is written by the server's signal handler
            if dump.exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        data = json.loads(dump.read_text())
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    records = [r for r in data["records"] if "embed" in r][-len(client_ms):]
    rows = [_split(r, c) for r, c in zip(records, client_ms, strict=True)]
    slow = sorted(range(len(rows)), key=lambda i: -client_ms[i])[:10]
    print(f"semantic hits through blink serve, {args.entries} entries, {len(rows)} requests "
          f"(server on core {server_core}, client on core {client_core}; the machine may be shared)")
    print(f"  {'stage':<10} {'p50':>7} {'p90':>7} {'p99':>7}   mean of the 10 slowest requests (ms)")
    for name in ("client", *_STAGES):
        xs = client_ms if name == "client" else [r[name] for r in rows]
        p50, p90, p99 = np.percentile(xs, [50, 90, 99])
        print(f"  {name:<10} {p50:7.3f} {p90:7.3f} {p99:7.3f}   {np.mean([xs[i] for i in slow]):7.3f}")
    t0, t1 = records[0]["asgi"][0], records[-1]["asgi"][1]
    during = [(gen, round(dur * 1000, 2)) for start, dur, gen in data["gc"] if t0 <= start <= t1]
    print(f"  garbage collections while timed (generation, ms): {during or 'none'}")


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
