"""What does the async safety filter add to TTFT? Blink with safety off vs ``async``, side by side.

Two Blink servers in front of the local fake upstream (``tests/upstream_server.py``, 32 tokens,
no delay), both with the exact cache on (every prompt new: miss, then fill, which in async mode
waits for the verdict), pinned to the same one core and loaded in alternating rounds so drift on
a shared machine hits both alike; the upstream and this load generator share the other core(s).
Prints TTFT p50/p99 at concurrency 1 and 16 and what async mode adds. Async checks run when the
gateway's loop is idle, so after each round the benchmark waits until the async server's backlog
is empty (``blink_safety_backlog`` on /metrics): deferred checks never run during the other
server's round, where they would steal its core and flatter async mode.

    python benchmarks/safety_overhead.py [--requests 300] [--rounds 2] [--profanity auto|on|off]

``--profanity on``: the request path also runs the offensive-language check (extra
``moderation``); by default (``auto``) only /v1/moderations does, so the filter is rules + PII.

Goal (issue #9): async mode adds <= 0.2 ms TTFT p99.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from _proc import free_port, pct, pinned, split_cores, stop, wait_ready
from gateway_overhead import drive

ROOT = Path(__file__).resolve().parent.parent


def config(tmp: Path, up_port: int, port: int, safety: bool, profanity: str) -> Path:
    cfg = {
        "server": {"port": port, "max_concurrent_streams": 4096, "log_level": "warning"},
        "models": [{"name": "fake", "kind": "openai_http", "base_url": f"http://127.0.0.1:{up_port}/v1"}],
        "cache": {"exact": {"enabled": True}, "store": "memory"},
        "safety": {"enabled": safety, "mode": "async", "blocklist": ["forbidden fruit", "secret sauce"],
                   "profanity": profanity},
        "obs": {"request_log": "off"},
    }
    path = tmp / f"blink-{'async' if safety else 'off'}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wait_checked(port: int, timeout: float = 60.0) -> float:
    """Seconds until the server's async-safety backlog is empty (0 for a server without one)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        m = re.search(r"^blink_safety_backlog (\S+)$", text, re.MULTILINE)
        if m is None or float(m.group(1)) == 0:
            return time.perf_counter() - t0
        time.sleep(0.05)
    raise RuntimeError(f"safety backlog on port {port} not drained in {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300, help="requests per round and concurrency level")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per server")
    ap.add_argument("--profanity", choices=("auto", "on", "off"), default="auto", help="safety.profanity")
    args = ap.parse_args()
    core, other = split_cores()
    if other:
        os.sched_setaffinity(0, other)
    tmp = Path(tempfile.mkdtemp(prefix="blink-safety-"))
    up_port = free_port()
    up = subprocess.Popen([sys.executable, str(ROOT / "tests/upstream_server.py"), "--port", str(up_port), "--tokens", "32"],
                          preexec_fn=pinned(other))  # fmt: skip
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, on in (("off", False), ("async", True)):
            port = free_port()
            proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(config(tmp, up_port, port, on, args.profanity))],
                                    cwd=ROOT, preexec_fn=pinned(core), stdout=subprocess.DEVNULL)  # fmt: skip
            servers[name] = (proc, port)
            wait_ready(f"http://127.0.0.1:{port}/health", proc)
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", up)
        print(f"cores: servers {core or 'any'}; upstream + load generator {other or 'any'}")
        ttfts: dict[tuple[str, int], list[float]] = {(n, c): [] for n in servers for c in (1, 16)}
        counter = itertools.count()
        for _ in range(args.rounds):
            for conc in (1, 16):
                for name, (_, port) in servers.items():
                    url = f"http://127.0.0.1:{port}/v1/chat/completions"
                    lat, _, errors = asyncio.run(drive(url, "fake", "none", conc, args.requests, counter))
                    ttfts[name, conc] += lat
                    settle = wait_checked(port)
                    if settle > 0.05:
                        print(f"  {name} c{conc}: deferred checks finished {settle:.2f} s after the round")
                    if errors:
                        print(f"  {name} c{conc}: {errors} errors")
        print(f"{'safety':<8}{'conc':>5}{'TTFT p50':>10}{'p99':>9}   (ms)")
        for (name, conc), xs in ttfts.items():
            print(f"{name:<8}{conc:>5}{pct(xs, 50):>10.2f}{pct(xs, 99):>9.2f}")
        for conc in (1, 16):
            off, on = ttfts["off", conc], ttfts["async", conc]
            print(f"concurrency {conc:>2}: async adds TTFT p50 {pct(on, 50) - pct(off, 50):+.2f} ms, "
                  f"p99 {pct(on, 99) - pct(off, 99):+.2f} ms (goal p99 <= +0.2 ms); ratio p99 {pct(on, 99) / pct(off, 99):.3f}")
    finally:
        stop(*(p for p, _ in servers.values()), up)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
