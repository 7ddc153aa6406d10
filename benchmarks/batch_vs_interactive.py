"""The batch lane must not hurt interactive latency, and light interactive load must not starve it.

One ``blink serve`` (embedded engine, SmolLM2-135M's shape with random weights by default),
pinned to one core; this load generator on the other. Three phases in one run:

1. interactive alone: ``--interactive`` streamed chat requests, one every ``1/--rate`` s
   (open loop); TTFT = time to the first content chunk;
2. batch alone: a ``--lines``-line Batch API job; throughput = lines / wall time;
3. both: the same batch again with the same interactive load on top.

Prints interactive p99 TTFT with the batch / without (goal <= 1.2) and batch throughput with
light interactive load / alone (goal >= 0.8). The issue asks for a 2,000-line batch; on a
2-core machine that takes longer than this benchmark's 3-minute budget with the SmolLM2 shape,
so ``--lines`` defaults to 80 (about 3 minutes in all): say which you ran. ``--max-batch-seqs`` (the engine's
``max_batch_seqs``) trades the batch lane's absolute throughput for interactive TTFT; 0 = no cap.

    python benchmarks/batch_vs_interactive.py [--shape smollm2-135m|tiny] [--lines 80]
        [--interactive 40] [--rate 2] [--max-tokens 16] [--max-batch-seqs 2] [--max-batch-tokens 16]
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


def build_model(shape: str, root: Path) -> Path:
    from blink.demo.tiny import build_tiny_checkpoint

    if shape == "tiny":
        return build_tiny_checkpoint(root / "tiny", "llama", hidden_size=128, num_layers=4, num_heads=4,
                                     num_kv_heads=2, intermediate_size=256, dtype="bfloat16")
    sys.path.insert(0, str(Path(__file__).parent))
    from engine_cpu import build

    return build(shape, root, "bfloat16")


def start_server(model: Path, port: int, tmp: Path, cores: set[int] | None, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    config = {
        "server": {"port": port, "log_level": "warning"},
        "models": [{"name": "m", "kind": "embedded", "model": str(model), "dtype": "bfloat16", "threads": 1,
                    "max_num_seqs": args.max_num_seqs, "max_batch_seqs": args.max_batch_seqs,
                    "max_batch_tokens": args.max_batch_tokens}],
        # As many lines in flight as the engine has slots: the scheduler decides what runs.
        "batch": {"path": str(tmp / "batch.db"), "max_concurrency": args.max_num_seqs},
    }
    if args.engine_nice is not None:
        config["models"][0]["engine_nice"] = args.engine_nice
    (tmp / "blink.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "blink.cli", "serve", "--config", str(tmp / "blink.yaml")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, preexec_fn=pinned(cores), stdout=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/ready", proc, timeout=180)
    return proc


def prompt(i: int, tag: str) -> str:
    """Same length in every phase; the leading tag keeps one phase from hitting the prefix cache
    with another phase's prompts (which would flatter whichever phase runs second)."""
    return f"{tag} request {i}: summarise the following note about item {i * 37 % 101} in one short sentence."


async def interactive_one(client: httpx.AsyncClient, i: int, max_tokens: int, tag: str) -> float:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt(i, tag)}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    ttft: float | None = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if ttft is None and line.startswith("data: {") and '"content"' in line:
                ttft = (time.perf_counter() - t0) * 1000
    if ttft is None:
        raise RuntimeError("stream ended without content")
    return ttft


async def interactive_load(client: httpx.AsyncClient, n: int, rate: float, max_tokens: int, tag: str,
                           stop_when: asyncio.Event | None = None) -> list[float]:
    tasks = []
    for i in range(n):
        if stop_when is not None and stop_when.is_set():
            break
        tasks.append(asyncio.create_task(interactive_one(client, i, max_tokens, tag)))
        await asyncio.sleep(1.0 / rate)
    return list(await asyncio.gather(*tasks))


async def run_batch(client: httpx.AsyncClient, lines: int, max_tokens: int, tag: str,
                    started: asyncio.Event | None = None) -> tuple[float, int]:
    """Seconds from creation to completion, and completion tokens produced."""
    data = b"".join(orjson.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": {"model": "m", "messages": [{"role": "user", "content": prompt(i, tag)}],
                                           "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}})
                    + b"\n" for i in range(lines))
    up = (await client.post("/v1/files", files={"file": (f"{tag}.jsonl", data)}, data={"purpose": "batch"})).json()
    t0 = time.perf_counter()
    batch = (await client.post("/v1/batches", json={"input_file_id": up["id"], "endpoint": "/v1/chat/completions",
                                                    "completion_window": "24h"})).json()
    while batch["status"] not in ("completed", "failed", "cancelled"):
        await asyncio.sleep(0.1)
        batch = (await client.get(f"/v1/batches/{batch['id']}")).json()
        if started is not None and not started.is_set() and batch["request_counts"]["completed"] > 0:
            started.set()
    elapsed = time.perf_counter() - t0
    assert batch["status"] == "completed" and batch["request_counts"]["failed"] == 0, batch
    out = (await client.get(f"/v1/files/{batch['output_file_id']}/content")).content
    tokens = sum(orjson.loads(x)["response"]["body"]["usage"]["completion_tokens"] for x in out.splitlines())
    return elapsed, tokens


async def main_async(args: argparse.Namespace, port: int) -> None:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits) as client:
        await interactive_load(client, 4, 4.0, args.max_tokens, "warm")  # warm-up: both lanes, every batch size
        await run_batch(client, 16, args.batch_max_tokens, "warm")
        print(f"phase 1: {args.interactive} interactive requests at {args.rate}/s, alone", flush=True)
        alone = await interactive_load(client, args.interactive, args.rate, args.max_tokens, "solo")
        print(f"phase 2: {args.lines}-line batch, alone", flush=True)
        batch_alone_s, tokens_alone = await run_batch(client, args.lines, args.batch_max_tokens, "lone")
        print("phase 3: the same batch with the interactive load on top", flush=True)
        started, done = asyncio.Event(), asyncio.Event()
        batch_task = asyncio.create_task(run_batch(client, args.lines, args.batch_max_tokens, "both", started))
        batch_task.add_done_callback(lambda _: done.set())
        await started.wait()  # measure against a batch in steady state
        mixed = await interactive_load(client, args.interactive, args.rate, args.max_tokens, "chat", stop_when=done)
        batch_mixed_s, tokens_mixed = await batch_task
    if not done.is_set() or len(mixed) < args.interactive:
        print(f"note: the batch finished before the interactive phase ended ({len(mixed)} of {args.interactive} "
              "interactive requests overlapped it); raise --lines for a full overlap")
    p50a, p99a, p50m, p99m = pct(alone, 50), pct(alone, 99), pct(mixed, 50), pct(mixed, 99)
    thr_alone, thr_mixed = args.lines / batch_alone_s, args.lines / batch_mixed_s
    print(f"\nshape={args.shape} lines={args.lines} batch max_tokens={args.batch_max_tokens} "
          f"max_num_seqs={args.max_num_seqs} max_batch_seqs={args.max_batch_seqs} "
          f"max_batch_tokens={args.max_batch_tokens} "
          f"interactive={len(alone)}/{len(mixed)} at {args.rate}/s max_tokens={args.max_tokens}")
    print(f"interactive TTFT alone:      p50 {p50a:7.1f} ms  p99 {p99a:7.1f} ms")
    print(f"interactive TTFT with batch: p50 {p50m:7.1f} ms  p99 {p99m:7.1f} ms")
    print(f"batch alone:      {thr_alone:6.2f} lines/s  {tokens_alone / batch_alone_s:7.1f} tok/s  ({batch_alone_s:.1f} s)")
    print(f"batch + interactive: {thr_mixed:6.2f} lines/s  {tokens_mixed / batch_mixed_s:7.1f} tok/s  ({batch_mixed_s:.1f} s)")
    ttft_ratio, thr_ratio = p99m / p99a, thr_mixed / thr_alone
    print(f"RATIO interactive p99 TTFT with batch / without: {ttft_ratio:.2f}x (goal <= 1.20) "
          f"{'PASS' if ttft_ratio <= 1.2 else 'MISS'}")
    print(f"RATIO batch throughput with light interactive / alone: {thr_ratio:.2f} (goal >= 0.80) "
          f"{'PASS' if thr_ratio >= 0.8 else 'MISS'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="smollm2-135m", help="smollm2-135m (default) or tiny")
    ap.add_argument("--lines", type=int, default=80, help="batch size (the issue's figure: 2000)")
    ap.add_argument("--batch-max-tokens", type=int, default=16)
    ap.add_argument("--interactive", type=int, default=40)
    # Light interactive load: two requests a second, a few percent of the engine's capacity.
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-batch-seqs", type=int, default=2,
                    help="batch sequences running at once (0 = no cap): bounds an interactive request's wait")
    ap.add_argument("--max-batch-tokens", type=int, default=16,
                    help="tokens the batch lane computes per step (0 = no cap): spreads batch prefill")
    ap.add_argument("--engine-nice", type=int, default=None,
                    help="engine-core process niceness (default: the config's default)")
    args = ap.parse_args()
    server_cores, client_cores = split_cores()
    if client_cores:
        os.sched_setaffinity(0, client_cores)
    with tempfile.TemporaryDirectory(prefix="blink-bench-batch-") as tmp:
        model = build_model(args.shape, Path(tmp))
        port = free_port()
        proc = start_server(model, port, Path(tmp), server_cores, args)
        try:
            asyncio.run(main_async(args, port))
        finally:
            stop(proc)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
