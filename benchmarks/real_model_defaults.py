"""The fast defaults vs explicit flags on the real SmolLM2 (issue #22: defaults within 10% of the best flags).

    python benchmarks/real_model_defaults.py [--lengths 256,1024] [--decode-tokens 48]

In-process engines on the GGUF ``blink serve`` falls back to offline: the configuration
``blink serve --model M`` picks here (blink/engine/fast_defaults.py), and explicit alternatives,
each timed for TTFT (one prompt, prefix caching off) and batch-1 decode, the configurations
alternating round by round so the machine's drift hits all alike. All engines share one process,
so torch's thread count is set to each configuration's before it is timed.
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

from blink.backends.embedded import serving_choice  # noqa: E402
from blink.config import ModelSettings  # noqa: E402
from blink.demo.default_model import fetch_smollm2  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402


def timed(engine: LLMEngine, prompt: list[int], n: int) -> tuple[float, float]:
    """(TTFT s, decode tok/s after the first token) of one greedy request."""
    engine.add_request(f"r{time.perf_counter_ns()}", prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    t0 = time.perf_counter()
    first: float | None = None
    count = 0
    while engine.has_unfinished():
        for o in engine.step():
            count += len(o.new_token_ids)
            if first is None and count:
                first = time.perf_counter()
    assert first is not None
    return first - t0, (count - 1) / (time.perf_counter() - first)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="256,1024")
    ap.add_argument("--decode-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    path = fetch_smollm2()
    default = serving_choice(ModelSettings(model=str(path)))
    configs = {
        f"defaults ({default.dtype}, {default.quantization}, {default.threads} thr)":
            (default.dtype, default.quantization, default.threads),
        "bf16 + int8-dense-prefill, 2 thr": ("bfloat16", "int8-dense-prefill", 2),
        "bf16 + int8-w8a8, 2 thr (issue's best flags)": ("bfloat16", "int8-w8a8", 2),
    }
    engines = {name: LLMEngine(EngineConfig(model=str(path), dtype=d, quantization=q, threads=t,  # type: ignore[arg-type]
                                            max_model_len=2048, kv_cache_memory_bytes=128 << 20,
                                            enable_prefix_caching=False), path)
               for name, (d, q, t) in configs.items()}
    lengths = [int(x) for x in args.lengths.split(",")]
    rng = random.Random(0)
    prompts = {n: [rng.randrange(100, 40000) for _ in range(n)] for n in lengths}
    ttft: dict[tuple[str, int], list[float]] = {}
    rate: dict[str, list[float]] = {}
    for engine in engines.values():
        timed(engine, prompts[lengths[0]][:16], 4)  # warm-up
    for _ in range(args.reps):
        for name, engine in engines.items():
            # torch's thread count is per process, and each runner set it only when built.
            torch.set_num_threads(engine.config.threads)
            for n in lengths:
                t, r = timed(engine, prompts[n], args.decode_tokens if n == lengths[0] else 2)
                ttft.setdefault((name, n), []).append(t)
                if n == lengths[0]:
                    rate.setdefault(name, []).append(r)
    cpu = read_cpu_features()
    print(f"## Defaults vs flags, real SmolLM2-135M-Instruct (GGUF), median of {args.reps} alternating rounds\n"
          f"CPU: {cpu.model_name}; flags: {', '.join(cpu.listed_flags())}; {cpu.cores} cores\n")
    print("| configuration | " + " | ".join(f"TTFT ms @ {n}" for n in lengths) + " | batch-1 decode tok/s |")
    print("|---|" + "---|" * (len(lengths) + 1))
    for name in engines:
        cells = " | ".join(f"{statistics.median(ttft[(name, n)]) * 1000:.0f}" for n in lengths)
        print(f"| {name} | {cells} | {statistics.median(rate[name]):.1f} |")
    print("\n(measured on a loaded shared machine)")


if __name__ == "__main__":
    main()
