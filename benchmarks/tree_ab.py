"""Engine figures of whichever Blink tree is on PYTHONPATH, for before/after runs across commits.

Prints one ``RESULT {json}`` line: TTFT at ``--lengths`` (median of 5 prompts each), batch-1
decode tok/s and process CPU ms per token (median of 9 runs of 64 tokens), aggregate tok/s of
``--streams`` concurrent requests (median of 3, their prefill included), SmolLM2-135M's shape,
bf16, ``--quantization``. ``--profile`` adds a torch profile of one 1,024-token prefill (self CPU
per op). Run it in alternation against a worktree of the older commit, each in its own process:

    git worktree add /tmp/before <commit>
    for i in 1 2; do
      PYTHONPATH=/tmp/before python benchmarks/tree_ab.py --quantization int8-dense-prefill
      python benchmarks/tree_ab.py --quantization int8-w8a8
    done

Only the engine's public API is used, so older trees run it unchanged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import blink_ttft, build, rand_prompt, run_together  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402


def decode(engine: LLMEngine, prompt: list[int], tokens: int) -> tuple[float, float]:
    """(decode tok/s after the first token, CPU s per decoded token) of one request: like
    engine_cpu.batch1_decode_tok_s, plus the process CPU time, which is steadier than wall time."""
    engine.add_request(f"r{time.perf_counter_ns()}", prompt,
                       SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    first = cpu0 = 0.0
    total = 0
    while engine.has_unfinished():
        for out in engine.step():
            total += len(out.new_token_ids)
            if not first and total:
                first, cpu0 = time.perf_counter(), time.process_time()
    decoded = max(total - 1, 1)
    return decoded / (time.perf_counter() - first), (time.process_time() - cpu0) / decoded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quantization", default="int8-w8a8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="256,1024")
    ap.add_argument("--streams", type=int, default=16, help="concurrent streams for the aggregate figure (0: skip)")
    ap.add_argument("--stream-tokens", type=int, default=64)
    ap.add_argument("--profile", action="store_true", help="also profile one 1,024-token prefill")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build("smollm2-135m", Path(tmp), "bfloat16")
        engine = LLMEngine(EngineConfig(model=str(path), dtype="bfloat16", threads=args.threads,  # type: ignore[arg-type]
                                        max_model_len=2048, kv_cache_memory_bytes=1 << 30,
                                        max_num_batched_tokens=2048, enable_prefix_caching=False,
                                        quantization=args.quantization), path)
        decode(engine, rand_prompt(16, 1), 16)
        blink_ttft(engine, rand_prompt(1024, 2), "warm-1024")
        ttft = {n: statistics.median(blink_ttft(engine, rand_prompt(n, 1000 * n + i), f"t{n}-{i}") for i in range(5))
                for n in map(int, args.lengths.split(","))}
        runs = [decode(engine, rand_prompt(32, 5), 64) for _ in range(9)]
        streams = []
        for i in range(3 if args.streams else 0):  # aggregate tok/s, the streams' 32-token prefill included
            t0, _, total = run_together(engine, [rand_prompt(32, 7000 + 100 * i + s) for s in range(args.streams)],
                                        args.stream_tokens)
            streams.append(total / (time.perf_counter() - t0))
        print("RESULT", json.dumps({
            "quantization": args.quantization, "ttft_ms": ttft,
            "decode_tok_s": statistics.median(r[0] for r in runs),
            "decode_cpu_ms_per_token": statistics.median(r[1] for r in runs) * 1000,
            **({f"streams{args.streams}_tok_s": statistics.median(streams)} if streams else {})}), flush=True)
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                blink_ttft(engine, rand_prompt(1024, 999), "profiled")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
