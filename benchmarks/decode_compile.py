"""Decode: eager vs the fused C++ step vs ``EngineConfig.compile`` modes, side by side in one run.

Same random checkpoint (SmolLM2-135M's shape), bf16 activations + int8 weight-only linears
(``int8-dense-prefill``, Blink's best CPU config). Each engine is built once (compile time
printed), then the engines decode the same greedy requests in turn, ``--reps`` rounds, so the
machine's drift hits all of them alike. ``eager`` is today's path without the fused step
(``fused_decode=False``: int8 GEMV at 1-3 rows, oneDNN-packed bf16 GEMMs at 4+); ``fused`` is
``blink::DecodeStep`` (kernels/decode_step.py); ``layers``/``frozen`` are torch.compile modes
(``frozen`` compiles for ~80 s, so it is opt-in). Prints wall tokens/s (aggregate over
``--batch`` concurrent requests) and process CPU ms per token (steadier than wall time on a
shared machine) with each mode's ratio to eager, and whether its tokens equal eager's (bf16:
other kernels may round differently, see blink/engine/compiled_decode.py).

    python benchmarks/decode_compile.py --threads 2 [--modes fused,frozen] [--batch 16] [--tokens 64 --reps 3]

``--ab-kernel`` builds each mode twice, with aten's ``_weight_int8pack_mm`` (``<mode>-aten``,
``BLINK_INT8_KERNEL=aten``) and with ``blink::int8_gemv``, and prints ratios to ``eager-aten``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import build, rand_prompt  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402


def decode(engine: LLMEngine, tokens: int, seed: int, batch: int = 1) -> tuple[float, float, list[int]]:
    """(tokens/s, CPU ms per token, token ids) of ``batch`` concurrent requests, counted from the
    step after every prompt's prefill (the prefills run in the first step or two, excluded)."""
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    ids = [f"r{time.perf_counter_ns()}-{i}" for i in range(batch)]
    for i, rid in enumerate(ids):
        engine.add_request(rid, rand_prompt(32, seed * 100 + i), params)
    out: dict[str, list[int]] = {rid: [] for rid in ids}
    counted = 0
    wall0 = cpu0 = 0.0
    while engine.has_unfinished():
        step = engine.step()
        if wall0:
            counted += sum(len(o.new_token_ids) for o in step)
        for o in step:
            out[o.request_id] += o.new_token_ids
        if not wall0 and all(out.values()):
            wall0, cpu0 = time.perf_counter(), time.process_time()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return counted / wall, cpu / counted * 1000, [t for rid in ids for t in out[rid]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="fused", help="fused and/or compile modes (layers, frozen) to compare with eager")
    ap.add_argument("--batch", type=int, default=1, help="concurrent requests (16: the 16-stream step)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quantization", default="int8-dense-prefill")
    ap.add_argument("--ab-kernel", action="store_true", help="each mode with aten's int8 kernel and with ours")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build("smollm2-135m", Path(tmp), "bfloat16")
        engines: dict[str, LLMEngine] = {}
        modes = ["eager", *filter(None, args.modes.split(","))]
        if args.ab_kernel:
            modes = [v for m in modes for v in (f"{m}-aten", m)]
        for name in modes:
            mode = name.removesuffix("-aten")
            # Read when the model is quantized (engine build); the kernel is built once per process.
            os.environ["BLINK_INT8_KERNEL"] = "aten" if name.endswith("-aten") else "blink"
            cfg = EngineConfig(model=str(path), dtype="bfloat16", threads=args.threads, max_model_len=2048,
                               kv_cache_memory_bytes=1 << 28, enable_prefix_caching=False,
                               quantization=args.quantization, compile=mode not in ("eager", "fused"),
                               compile_mode=mode if mode not in ("eager", "fused") else "frozen",
                               fused_decode=mode == "fused", max_num_seqs=max(64, args.batch))
            engines[name] = LLMEngine(cfg, path)
            runner = engines[name].runner
            if mode == "fused" and not runner.fused_decode:
                raise SystemExit("fused: the fused decode step is not available here (see the log)")
            print(f"{name:12s} built, compile {runner.compile_seconds:6.1f} s, fused step {runner.fused_decode}",
                  flush=True)
            decode(engines[name], 4, 1, args.batch)  # warm
        rate: dict[str, list[float]] = {m: [] for m in engines}
        cpu: dict[str, list[float]] = {m: [] for m in engines}
        same: dict[str, bool] = dict.fromkeys(engines, True)
        for rep in range(args.reps):
            ref: list[int] = []
            for mode, engine in engines.items():
                r, c, toks = decode(engine, args.tokens, 5 + rep, args.batch)
                rate[mode].append(r)
                cpu[mode].append(c)
                ref = ref or toks
                same[mode] &= toks == ref
    base = next(iter(engines))
    base_r, base_c = statistics.median(rate[base]), statistics.median(cpu[base])
    print(f"\nbatch-{args.batch} decode, SmolLM2-135M shape, bf16 + {args.quantization}, {args.threads} threads, "
          f"{args.tokens} tokens x {args.reps} alternating rounds (medians)")
    vs = f"vs {base}"
    print(f"{'mode':12s} {'tok/s':>8s} {vs:>12s} {'CPU ms/tok':>11s} {vs:>12s}  tokens = {base}'s")
    for mode in engines:
        r, c = statistics.median(rate[mode]), statistics.median(cpu[mode])
        print(f"{mode:12s} {r:8.1f} {r / base_r:11.2f}x {c:11.2f} {base_c / c:11.2f}x  {same[mode]}")


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
