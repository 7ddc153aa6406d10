"""What does observability cost? Gateway CPU per request with metrics + tracing + logs off vs on.

Starts the local fake upstream (``tests/upstream_server.py``, 32 tokens, no delay), an OTLP/HTTP
sink, and two ``blink serve --upstream`` gateways in front of the upstream: one with every sink
off (no metrics, no request log, no dashboard stats, no tracing), one with everything on
(Prometheus series, OTLP spans to the sink, one JSON log line per request to a file, live
dashboard stats). Both gateways share one core; the upstream, the sink and the load generator
share the other. Rounds alternate between the two gateways so drift on a shared machine hits
both alike. Prints CPU-ms per request (psutil on each gateway PID) and ratios against "off"; a third gateway,
"metrics", has everything but tracing on, and "sampled" traces 10% of requests
(``obs.trace_sample_ratio=0.1``), to split the cost.

    python benchmarks/obs_overhead.py [--rounds 5] [--requests 400] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import psutil
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _proc import free_port, pct, pinned, stop, wait_ready  # noqa: E402
from server_overhead import ROOT, drive  # noqa: E402


async def otlp_sink(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Accepts OTLP/HTTP exports and drops them (the collector's cost is not Blink's)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x-protobuf")]})
    await send({"type": "http.response.body", "body": b""})


def background_cpu(proc: psutil.Process) -> float:
    """CPU seconds of every thread but the event loop's (span export runs in one of them)."""
    return sum(t.user_time + t.system_time for t in proc.threads() if t.id != proc.pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400, help="requests per gateway per round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    server_cores = {cores[-1]} if len(cores) > 1 else None
    other_cores = set(cores[:-1]) if len(cores) > 1 else None
    if other_cores:
        os.sched_setaffinity(0, other_cores)

    sink_port = free_port()
    sink = uvicorn.Server(uvicorn.Config(otlp_sink, host="127.0.0.1", port=sink_port, log_level="warning",
                                         lifespan="off"))
    threading.Thread(target=sink.run, daemon=True).start()

    up_port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    up = subprocess.Popen([sys.executable, str(ROOT / "tests/upstream_server.py"), "--port", str(up_port),
                           "--tokens", str(args.tokens)], preexec_fn=pinned(other_cores))
    procs.append(up)
    log_dir = tempfile.mkdtemp(prefix="blink-obs-bench-")
    configs = {
        "off": {"BLINK_OBS__METRICS": "false", "BLINK_OBS__REQUEST_LOG": "off", "BLINK_OBS__DASHBOARD": "false"},
        "metrics": {"BLINK_OBS__METRICS": "true", "BLINK_OBS__REQUEST_LOG": f"{log_dir}/metrics-only.jsonl",
                    "BLINK_OBS__DASHBOARD": "true"},
        "sampled": {"BLINK_OBS__METRICS": "true", "BLINK_OBS__REQUEST_LOG": f"{log_dir}/sampled.jsonl",
                    "BLINK_OBS__DASHBOARD": "true", "BLINK_OBS__OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
                    "BLINK_OBS__TRACE_SAMPLE_RATIO": "0.1"},
        "on": {"BLINK_OBS__METRICS": "true", "BLINK_OBS__REQUEST_LOG": f"{log_dir}/requests.jsonl",
               "BLINK_OBS__DASHBOARD": "true", "BLINK_OBS__OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"},
    }
    ports: dict[str, int] = {}
    servers: dict[str, psutil.Process] = {}
    try:
        for name, env in configs.items():
            ports[name] = free_port()
            clean = {k: v for k, v in os.environ.items() if not k.startswith(("BLINK_OBS", "OTEL_"))}
            proc = subprocess.Popen(
                [sys.executable, "-m", "blink.cli", "serve", "--upstream", f"http://127.0.0.1:{up_port}/v1",
                 "--served-model-name", "fake", "--port", str(ports[name]), "--log-level", "warning",
                 "--max-concurrent-streams", "1024"],
                cwd=ROOT, env={**clean, **env}, preexec_fn=pinned(server_cores), stdout=subprocess.DEVNULL,
            )
            procs.append(proc)
            servers[name] = psutil.Process(proc.pid)
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", up)
        for name in configs:
            wait_ready(f"http://127.0.0.1:{ports[name]}/ready", procs[1 + list(configs).index(name)])
        print(f"cores: gateways {server_cores or 'any'}, upstream + sink + load generator {other_cores or 'any'}")
        cpu_ms: dict[str, list[float]] = {name: [] for name in configs}
        ttft: dict[str, list[float]] = {name: [] for name in configs}
        for r in range(args.rounds):
            names = list(configs)
            order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
            for name in order:
                bg0 = background_cpu(servers[name])
                cpu0 = sum(servers[name].cpu_times()[:2])
                t, _e2e, errors = asyncio.run(drive(f"http://127.0.0.1:{ports[name]}/v1", args.concurrency,
                                                    args.requests, args.tokens))
                cpu = sum(servers[name].cpu_times()[:2]) - cpu0
                bg = background_cpu(servers[name]) - bg0
                n = args.requests + min(20, args.requests)  # drive() adds up to 20 warm-up requests
                cpu_ms[name].append(cpu / n * 1000.0)
                ttft[name].append(pct(t, 50))
                print(f"round {r + 1} {name:>7}: {cpu / n * 1000.0:.3f} CPU-ms/request "
                      f"({bg / n * 1000.0:.3f} in background threads), TTFT p50 {pct(t, 50):.2f} ms"
                      + (f", {errors} errors" if errors else ""))
        lines = sum(1 for _ in open(f"{log_dir}/requests.jsonl"))
        off = statistics.median(cpu_ms["off"])
        print()
        for name in configs:
            med = statistics.median(cpu_ms[name])
            print(f"{name:>7}: median {med:.3f} CPU-ms/request, /off {med / off:.3f} (+{100 * (med / off - 1):.1f}%), "
                  f"median TTFT p50 {statistics.median(ttft[name]):.2f} ms")
        print(f"request log lines written by the 'on' gateway: {lines}")
    finally:
        stop(*reversed(procs))
        sink.should_exit = True


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
