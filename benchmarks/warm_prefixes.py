"""Warm prefixes: first-request TTFT after a burst of other traffic, with hot-prefix pinning vs without.

    python benchmarks/warm_prefixes.py [--system-tokens 512] [--churn 6] [--rounds 3] [--quick]

Two in-process engines on the real SmolLM2-135M-Instruct GGUF, identical but for
``pinned_prefix_blocks`` (0 vs the system prompt's blocks), each with a KV pool about three
system prompts large. Each round, alternating engines: the prefix cache is reset; three requests
share a ``--system-tokens`` system prompt (it becomes hot: reused twice); then ``--churn`` one-off
prompts (another tenant's traffic while this one is quiet) pass through the pool; then the first
request of the quiet tenant is timed (TTFT) and its reused prefix tokens counted. Prints the
median TTFT of that request with pinning and without, and their ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blink.demo.default_model import fetch_smollm2  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

BLOCK = 16


def first_token_s(engine: LLMEngine, prompt: list[int]) -> float:
    engine.add_request(f"r{time.perf_counter_ns()}", prompt, SamplingParams(max_tokens=1, temperature=0.0))
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system-tokens", type=int, default=512)
    ap.add_argument("--churn", type=int, default=6, help="one-off prompts between the hot period and the timed request")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="256-token system prompt, one round: proves it runs")
    args = ap.parse_args()
    if args.quick:
        args.system_tokens, args.rounds = 256, 1
    torch.set_num_threads(args.threads)
    path = fetch_smollm2()
    system_blocks = args.system_tokens // BLOCK
    pool_tokens = 3 * args.system_tokens + 4 * BLOCK
    probe = LLMEngine(EngineConfig(model=str(path), threads=args.threads, max_model_len=2048,
                                   kv_cache_memory_bytes=64 << 20), path)
    bytes_per_block = (64 << 20) // probe.block_manager.num_blocks
    del probe
    kv_bytes = bytes_per_block * (pool_tokens // BLOCK)
    engines = {
        "pinned": LLMEngine(EngineConfig(model=str(path), threads=args.threads, max_model_len=2048,
                                         kv_cache_memory_bytes=kv_bytes, pinned_prefix_blocks=system_blocks), path),
        "plain LRU": LLMEngine(EngineConfig(model=str(path), threads=args.threads, max_model_len=2048,
                                            kv_cache_memory_bytes=kv_bytes), path),
    }
    rng = random.Random(0)
    system = [rng.randrange(100, 40000) for _ in range(args.system_tokens)]
    churn_len = pool_tokens - args.system_tokens - 2 * BLOCK  # fits beside the pinned prompt
    ttft: dict[str, list[float]] = {name: [] for name in engines}
    reused: dict[str, list[int]] = {name: [] for name in engines}
    for engine in engines.values():
        first_token_s(engine, system[:32])  # warm-up
    for _ in range(args.rounds):
        churn = [[rng.randrange(100, 40000) for _ in range(churn_len)] for _ in range(args.churn)]
        questions = [[rng.randrange(100, 40000) for _ in range(12)] for _ in range(4)]
        for name, engine in engines.items():
            bm = engine.block_manager
            bm.reset_prefix_cache()
            for q in questions[:3]:
                first_token_s(engine, system + q)
            for c in churn:
                first_token_s(engine, c)
            hits_before = bm.prefix_cache_hits
            ttft[name].append(first_token_s(engine, system + questions[3]))
            reused[name].append(bm.prefix_cache_hits - hits_before)
    print(f"## Warm prefixes, real SmolLM2-135M-Instruct (GGUF), {args.rounds} alternating rounds\n"
          f"CPU: {read_cpu_features().describe()}\n"
          f"system prompt {args.system_tokens} tokens ({system_blocks} blocks), KV pool "
          f"{engines['pinned'].block_manager.num_blocks} blocks, {args.churn} one-off prompts of {churn_len} tokens "
          f"between the hot period and the timed request, {args.threads} thread(s)\n")
    for name in engines:
        print(f"{name:10}: first request after the burst: TTFT median {statistics.median(ttft[name]) * 1000:7.1f} ms, "
              f"prefix tokens reused {reused[name]}")
    ratio = statistics.median(ttft["pinned"]) / statistics.median(ttft["plain LRU"])
    print(f"RATIO first-request TTFT pinned / plain LRU: {ratio:.2f}x")


if __name__ == "__main__":
    main()
