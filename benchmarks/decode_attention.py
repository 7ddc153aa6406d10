"""Per-call time of ``blink::decode_attention_cpu`` (one query token per sequence against its paged
bf16 K/V) against the kernel as it was at ``--before`` and torch SDPA on gathered K/V.

Shapes: SmolLM2-135M (9 query / 3 KV heads of 64) and Qwen2.5-0.5B (14 / 2 of 64); batch 1/4/16/64
x context 64/256/1,024/2,048, 1 and 2 threads. The cache is a pool of 16-position blocks handed to
the sequences in shuffled order, as a running engine's pool is. The three run alternately per cell
(best of several calls each, median over ``--reps`` rounds) so the machine's drift hits all alike.
The SDPA peer gets its gather for free: K/V are gathered to ``[B, KVH, n, D]`` once, outside the
timing (what an engine without a paged kernel would at least pay on top).

The "before" kernel is the source at git revision ``--before`` (default: the commit this branch
started from), built under another op namespace (``blink_before``) so both load in one process.

    python benchmarks/decode_attention.py [--threads 1,2] [--batches 1,4,16,64]
        [--contexts 64,256,1024,2048] [--reps 5] [--cache bf16|fp8|int8] [--before REV | --before none] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from blink.engine.cpu_features import read_cpu_features
from blink.engine.kernels.attention import (
    decode_attention_cpu,
    decode_attention_scaled_cpu,
    decode_kernel_available,
)
from blink.engine.kernels.build import load_extension
from blink.engine.kv_cache_dtype import FP8, to_int8

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "blink/engine/kernels"
# The commit this branch (issue #23's decode kernel work) started from.
DEFAULT_BEFORE = "4491c02"
# (name, query heads, KV heads, head_dim)
SHAPES = [("SmolLM2-135M", 9, 3, 64), ("Qwen2.5-0.5B", 14, 2, 64)]
BLOCK = 16
Call = Callable[[], torch.Tensor]


def build_before(rev: str) -> bool:
    """The kernel at ``rev`` as ``torch.ops.blink_before.decode_attention_cpu``; False if it fails."""
    where = Path.home() / ".cache" / "blink" / "bench" / f"decode_attention_{rev}"
    where.mkdir(parents=True, exist_ok=True)
    for name in ("decode_attention.cpp", "decode_attention.h", "simd_exp.h"):
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{KERNELS}/{name}"], check=True, capture_output=True, text=True
        ).stdout
        if name.endswith(".cpp"):
            text = text.replace("TORCH_LIBRARY_FRAGMENT(blink,", "TORCH_LIBRARY(blink_before,")
            text = text.replace("TORCH_LIBRARY_IMPL(blink,", "TORCH_LIBRARY_IMPL(blink_before,")
        target = where / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
    return load_extension("blink_decode_attention_before", [where / "decode_attention.cpp"], ["-mavx512bf16"])


def best_of(call: Call, seconds: float) -> float:
    """Microseconds of the fastest call within ``seconds`` (at least 3 calls)."""
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 3 or spent < seconds:
        t = time.perf_counter()
        call()
        dt = time.perf_counter() - t
        best, spent, calls = min(best, dt), spent + dt, calls + 1
    return best * 1e6


def cell(shape: tuple[str, int, int, int], batch: int, ctx: int, before: bool, cache: str) -> dict[str, Call]:
    """The calls timed for one (shape, batch, context): ours, before (if built), SDPA (on the
    cache's values widened to bf16)."""
    _, heads, kvh, dim = shape
    g = torch.Generator().manual_seed(batch * 7919 + ctx)
    per_seq = (ctx + BLOCK - 1) // BLOCK
    blocks = batch * per_seq
    k_cache = torch.randn(blocks, BLOCK, kvh, dim, generator=g).bfloat16()
    v_cache = torch.randn(blocks, BLOCK, kvh, dim, generator=g).bfloat16()
    tables = torch.randperm(blocks, generator=g).view(batch, per_seq)
    lens = torch.full((batch,), ctx, dtype=torch.long)
    q = torch.randn(batch, heads, dim, generator=g).bfloat16()
    scale = dim**-0.5
    slots = (tables[:, :, None] * BLOCK + torch.arange(BLOCK)).reshape(batch, -1)[:, :ctx]
    keys = k_cache.view(-1, kvh, dim)[slots].transpose(1, 2).contiguous()  # [B, KVH, ctx, D]
    values = v_cache.view(-1, kvh, dim)[slots].transpose(1, 2).contiguous()
    query = q.view(batch, kvh, heads // kvh, dim)
    sdpa: Call = lambda: F.scaled_dot_product_attention(query, keys, values, scale=scale)  # noqa: E731
    if cache == "int8":
        (k8, ks), (v8, vs) = to_int8(k_cache.float()), to_int8(v_cache.float())
        ours: Call = lambda: decode_attention_scaled_cpu(q, k8, v8, ks, vs, tables, lens, scale)  # noqa: E731
        old = torch.ops.blink_before.decode_attention_scaled_cpu if before else None
        return {"ours": ours, "sdpa": sdpa} | ({"before": lambda: old(q, k8, v8, ks, vs, tables, lens, scale)} if old else {})
    if cache == "fp8":
        k_cache, v_cache = k_cache.to(FP8), v_cache.to(FP8)
    calls: dict[str, Call] = {
        "ours": lambda: decode_attention_cpu(q, k_cache, v_cache, tables, lens, scale),
        "sdpa": sdpa,
    }
    if before:
        calls["before"] = lambda: torch.ops.blink_before.decode_attention_cpu(q, k_cache, v_cache, tables, lens, scale)
    return calls


def errors(shape: tuple[str, int, int, int], batch: int, ctx: int, before: bool) -> str:
    """Max |out - float64 SDPA| of ours, before and aten's bf16 SDPA on one bf16-cache cell: the
    numerics (vdpbf16ps scores, chunked softmax) next to the old kernel's and aten's."""
    _, heads, kvh, dim = shape
    g = torch.Generator().manual_seed(1)
    per_seq = (ctx + BLOCK - 1) // BLOCK
    k_cache = torch.randn(batch * per_seq, BLOCK, kvh, dim, generator=g).mul(2).bfloat16()
    v_cache = torch.randn(batch * per_seq, BLOCK, kvh, dim, generator=g).bfloat16()
    tables = torch.randperm(batch * per_seq, generator=g).view(batch, per_seq)
    lens = torch.full((batch,), ctx, dtype=torch.long)
    q = torch.randn(batch, heads, dim, generator=g).mul(2).bfloat16()
    slots = (tables[:, :, None] * BLOCK + torch.arange(BLOCK)).reshape(batch, -1)[:, :ctx]
    keys = k_cache.view(-1, kvh, dim)[slots].transpose(1, 2)
    values = v_cache.view(-1, kvh, dim)[slots].transpose(1, 2)
    query = q.view(batch, kvh, heads // kvh, dim)

    def sdpa(dtype: torch.dtype) -> torch.Tensor:
        out = F.scaled_dot_product_attention(query.to(dtype), keys.to(dtype), values.to(dtype), scale=dim**-0.5)
        return out.reshape(batch, heads, dim).double()

    ref = sdpa(torch.float64)
    found = {"ours": decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5), "bf16 sdpa": sdpa(torch.bfloat16)}
    if before:
        found["before"] = torch.ops.blink_before.decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    # Before the output's bf16 rounding too: ours and before in fp32 (q, K, V the same bf16 values).
    q32, k32, v32 = q.float(), k_cache.float(), v_cache.float()
    found["ours fp32 q"] = decode_attention_cpu(q32, k32, v32, tables, lens, dim**-0.5)
    if before:
        found["before fp32 q"] = torch.ops.blink_before.decode_attention_cpu(q32, k32, v32, tables, lens, dim**-0.5)
    return ", ".join(f"{name} {float((out.double() - ref).abs().max()):.2e}" for name, out in found.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--contexts", default="64,256,1024,2048")
    parser.add_argument("--reps", type=int, default=5, help="alternating rounds per cell (median of their bests)")
    parser.add_argument("--seconds", type=float, default=0.05, help="time per call kind per round")
    parser.add_argument("--cache", choices=("bf16", "fp8", "int8"), default="bf16", help="KV cache dtype")
    parser.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of the old kernel, or 'none'")
    parser.add_argument("--quick", action="store_true", help="batch 1,16 x context 64,1024, 2 rounds: proves it runs")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.contexts, args.reps, args.seconds = "1,16", "64,1024", 2, 0.02
    if not decode_kernel_available():
        raise SystemExit("blink::decode_attention_cpu is unavailable here (needs AVX-512 and a compiler)")
    before = args.before != "none" and build_before(args.before)
    print(f"CPU: {read_cpu_features().describe()}")
    print(f"torch {torch.__version__}; before = {args.before if before else 'not built'}; {args.cache} cache, block {BLOCK}")
    print("per-call us (median over rounds of each round's best); ratios > 1: ours faster")
    head = f"{'shape':<13} {'thr':>3} {'batch':>5} {'ctx':>5} {'ours':>9} {'before':>9} {'sdpa':>9} {'before/ours':>11} {'sdpa/ours':>9}"
    for shape in SHAPES:
        batch, ctx = int(args.batches.split(",")[-1]), int(args.contexts.split(",")[-1])
        print(f"{shape[0]} max |out - float64| at batch {batch} x {ctx} (bf16 cache): {errors(shape, batch, ctx, before)}")
    for shape in SHAPES:
        print(head)
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for batch in (int(b) for b in args.batches.split(",")):
                for ctx in (int(c) for c in args.contexts.split(",")):
                    calls = cell(shape, batch, ctx, before, args.cache)
                    times: dict[str, list[float]] = {name: [] for name in calls}
                    for _ in range(args.reps):
                        for name, call in calls.items():
                            times[name].append(best_of(call, args.seconds))
                    us = {name: statistics.median(v) for name, v in times.items()}
                    old = us.get("before", float("nan"))
                    print(
                        f"{shape[0]:<13} {threads:>3} {batch:>5} {ctx:>5} {us['ours']:>9.1f} {old:>9.1f} "
                        f"{us['sdpa']:>9.1f} {old / us['ours']:>11.2f} {us['sdpa'] / us['ours']:>9.2f}"
                    )


if __name__ == "__main__":
    main()
