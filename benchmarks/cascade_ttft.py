"""What does the cascade cost in TTFT? Held-back probe tokens, and escalation to the large tier.

Two local fake upstreams stream 32 tokens 5 ms apart: "small" (confident: logprob -0.25 per
token, or unsure: -3.0) and "large". Blink serves three routes over them, and this script
measures client TTFT (p50/p99) side by side in one run for:
  small        the small tier alone (no cascade): the baseline;
  cascade-ok   cascade, small is confident: the client waits for the 8 probe tokens;
  cascade-esc  cascade, small is unsure: probe, drop, then the large tier's first token;
  large        the large tier alone.
Extra TTFT of the cascade = cascade-ok - small (kept) and cascade-esc - large (escalated).

    python benchmarks/cascade_ttft.py [--requests 100]
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

import httpx
import orjson
import yaml
from _proc import free_port, pct, pinned, split_cores, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fault_upstream import FaultUpstream  # noqa: E402
from live_server import LiveServer  # noqa: E402

# 5 ms between tokens (~200 tokens/s): the probe's 8 tokens then cost ~40 ms of TTFT.
TOKEN_DELAY_S = 0.005
FIRST_TOKEN = b'" t0"'


async def ttfts(url: str, model: str, n: int) -> list[float]:
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True})
    out: list[float] = []
    async with httpx.AsyncClient(timeout=30) as client:
        for i in range(n + 5):
            t0 = time.perf_counter()
            seen = b""
            first = 0.0
            async with client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as r:
                async for chunk in r.aiter_raw():
                    seen += chunk
                    if not first and FIRST_TOKEN in seen:
                        first = (time.perf_counter() - t0) * 1000
            if not first or b"[DONE]" not in seen:
                raise RuntimeError(f"{model}: bad stream {seen[:200]!r}")
            if i >= 5:  # five warm-up requests
                out.append(first)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    args = ap.parse_args()
    blink_core, other = split_cores()
    if other:
        os.sched_setaffinity(0, other)
    unsure = FaultUpstream(tokens=32, fault="unsure")
    sure, large = FaultUpstream(tokens=32), FaultUpstream(tokens=32)
    for up in (unsure, sure, large):
        up.defaults["delay"] = TOKEN_DELAY_S
    tmp = Path(tempfile.mkdtemp(prefix="blink-cascade-"))
    port = free_port()
    with LiveServer(unsure) as u, LiveServer(sure) as s, LiveServer(large) as g:
        models = {"small-unsure": u.url, "small-sure": s.url, "large-up": g.url}
        config = {
            "server": {"port": port, "log_level": "warning"},
            "models": [{"name": k, "kind": "openai_http", "base_url": f"{v}/v1"} for k, v in models.items()],
            "routes": [
                {"name": "small", "tiers": [{"name": "s", "replicas": ["small-sure"]}], "policies": []},
                {"name": "large", "tiers": [{"name": "l", "replicas": ["large-up"]}], "policies": []},
                {"name": "cascade-ok", "tiers": [{"name": "s", "replicas": ["small-sure"]},
                                                 {"name": "l", "replicas": ["large-up"]}], "policies": ["cascade"]},
                {"name": "cascade-esc", "tiers": [{"name": "s", "replicas": ["small-unsure"]},
                                                  {"name": "l", "replicas": ["large-up"]}], "policies": ["cascade"]},
            ],
        }  # fmt: skip
        (tmp / "blink.yaml").write_text(yaml.safe_dump(config))
        log = (tmp / "blink.log").open("wb")
        blink = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(tmp / "blink.yaml")],
                                 cwd=ROOT, preexec_fn=pinned(blink_core), stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", blink)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            res = {m: asyncio.run(ttfts(url, m, args.requests)) for m in ("small", "cascade-ok", "large", "cascade-esc")}
        finally:
            stop(blink)
    print(f"{'path':<13}{'TTFT p50':>9}{'p99':>9}   (ms, {args.requests} requests each, {TOKEN_DELAY_S * 1000:g} ms/token)")
    for m, xs in res.items():
        print(f"{m:<13}{pct(xs, 50):>9.2f}{pct(xs, 99):>9.2f}")
    kept = pct(res["cascade-ok"], 50) - pct(res["small"], 50)
    esc = pct(res["cascade-esc"], 50) - pct(res["large"], 50)
    print(f"cascade extra TTFT p50: kept on small +{kept:.1f} ms; escalated to large +{esc:.1f} ms")


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
