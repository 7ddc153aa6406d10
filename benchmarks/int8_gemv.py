"""int8 weight-only matmul at 1-64 rows: ``blink::int8_gemv`` vs aten ``_weight_int8pack_mm`` vs
oneDNN's bf16 GEMM on pre-packed dense weights (``packed_linear.py``).

One decode step of SmolLM2-135M: 30 layers x 4 linears (merged qkv [960, 576], o [576, 576],
merged gate_up [3072, 576], down [576, 1536]) + the tied LM head [49152, 576] = 121 matmuls with
distinct weights, so nothing stays in cache (134 MB int8, 268 MB packed bf16), bf16 activations
of M rows. For each thread count and M the three run alternately ``--reps`` times so the
machine's drift hits all alike; prints ms per step (median of the per-rep bests), int8 weight
GB/s, and ours' speed-up over each.

    python benchmarks/int8_gemv.py [--threads 1,2] [--rows 1,2,3,4,8,16,32,64] [--reps 3]

``--w8a8`` instead times the prefill linears of mode ``int8-w8a8`` (kernels/w8a8.py) on the same
four layer shapes, one GEMM at a time at ``--rows`` (default 256,1024): oneDNN bf16 on the
pre-packed weight vs W8A8 (``blink::quantize_rows`` + ``torch._int_mm`` + ``blink::dequant_rows``)
on the transposed view of the [N, K] int8 weight and on a [K, N]-contiguous copy, plus the three
W8A8 stages alone and, at up to 64 rows, ``blink::int8_gemv`` (what mode int8 runs there); ms per
GEMM (median of per-rep bests) and the bf16 / W8A8 ratio.

    python benchmarks/int8_gemv.py --w8a8 [--threads 2] [--rows 256,1024] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from blink.engine.kernels.int8_gemv import MAX_ROWS, int8_gemv_available
from blink.engine.layers.packed_linear import cpu_bf16_packing_supported, pack_weight, packed_linear

# SmolLM2-135M: hidden 576, 9 heads / 3 kv heads of 64 (qkv 576 + 2 x 192), intermediate 1536.
LAYER_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
LAYERS = 30
HEAD = (49152, 576)

# (int8 weight, bf16 scales, packed bf16 dense weight or None)
Linear = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
Op = Callable[[torch.Tensor, Linear], torch.Tensor]


def make_step(pack: bool) -> list[Linear]:
    g = torch.Generator().manual_seed(0)

    def one(n: int, k: int) -> Linear:
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        s = (torch.rand(n, generator=g) / 100).to(torch.bfloat16)
        return w, s, pack_weight((w.float() * s.float()[:, None]).bfloat16()) if pack else None

    return [one(n, k) for _ in range(LAYERS) for n, k in LAYER_SHAPES] + [one(*HEAD)]


def step_time(op: Op, step: list[Linear], xs: dict[int, torch.Tensor], n: int) -> float:
    """Seconds per pass over the step's linears (best of ``n``: the floor is what the kernel can do)."""
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        for lin in step:
            op(xs[lin[0].shape[1]], lin)
        best = min(best, time.perf_counter() - t)
    return best


def best_time(fn: Callable[[], object], n: int) -> float:
    """Seconds per call, best of ``n`` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def w8a8_ops(m: int, n: int, k: int) -> dict[str, Callable[[], object]]:
    """The timed calls for one ``[m, k] x [n, k]^T`` prefill GEMM (weights as linear_int8.py makes them)."""
    from blink.engine.kernels.w8a8 import w8a8_linear
    from blink.engine.layers.linear_int8 import quantize_per_channel

    g = torch.Generator().manual_seed(0)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(torch.bfloat16)
    q, s = quantize_per_channel(w)
    q_kn = q.t().contiguous()
    packed = pack_weight(w)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    xq, xs = torch.ops.blink.quantize_rows(x)
    acc = torch._int_mm(xq, q_kn)
    bf16_scales = s.to(torch.bfloat16)
    gemv = {"int8_gemv": lambda: torch.ops.blink.int8_gemv(x, q, bf16_scales)} if m <= MAX_ROWS else {}
    return {
        **gemv,
        "bf16 packed": lambda: packed_linear(x, packed, None),
        "w8a8 view": lambda: w8a8_linear(x, q.t(), s, None, False),
        "w8a8 [K,N]": lambda: w8a8_linear(x, q_kn, s, None, False),
        "quant": lambda: torch.ops.blink.quantize_rows(x),
        "int_mm view": lambda: torch._int_mm(xq, q.t()),
        "int_mm [K,N]": lambda: torch._int_mm(xq, q_kn),
        "dequant": lambda: torch.ops.blink.dequant_rows(acc, xs, s, None, False),
    }


def w8a8_section(threads: list[int], rows: list[int], reps: int) -> None:
    """Per-GEMM times of mode int8-w8a8's prefill path vs the packed bf16 GEMM it replaces."""
    from blink.engine.kernels.w8a8 import w8a8_available

    if not (w8a8_available() and int8_gemv_available()):
        raise SystemExit("the W8A8 or int8_gemv kernels are not available on this machine (see the log)")
    print("ms per GEMM (median of per-rep bests); W8A8 includes quantize + dequantize")
    for t in threads:
        torch.set_num_threads(t)
        for m in rows:
            for n, k in LAYER_SHAPES:
                ops = w8a8_ops(m, n, k)
                times: dict[str, list[float]] = {name: [] for name in ops}
                for _ in range(reps):
                    for name, op in ops.items():
                        times[name].append(best_time(op, 3))
                med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
                cols = "  ".join(f"{name} {v:6.3f}" for name, v in med.items())
                bf16 = med["bf16 packed"]
                view, kn = bf16 / med["w8a8 view"], bf16 / med["w8a8 [K,N]"]
                ratio = f"bf16/w8a8 view {view:.2f}x, [K,N] {kn:.2f}x"
                print(f"threads={t} M={m:4d} {k:4d}->{n:4d}: {cols}  | {ratio}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=None, help="default 1,2 (2 with --w8a8)")
    ap.add_argument("--rows", default=None, help="default 1,2,3,4,8,16,32,64 (256,1024 with --w8a8)")
    ap.add_argument("--reps", type=int, default=None, help="default 3 (5 with --w8a8)")
    ap.add_argument("--w8a8", action="store_true", help="time int8-w8a8's prefill GEMMs instead")
    args = ap.parse_args()
    if args.w8a8:
        w8a8_section(
            [int(t) for t in (args.threads or "2").split(",")],
            [int(r) for r in (args.rows or "256,1024").split(",")],
            args.reps or 5,
        )
        return
    args.threads = args.threads or "1,2"
    args.rows = args.rows or "1,2,3,4,8,16,32,64"
    args.reps = args.reps or 3
    if not int8_gemv_available():
        raise SystemExit("blink::int8_gemv is not available on this machine (see the log)")
    pack = cpu_bf16_packing_supported(torch.zeros(1, 1, dtype=torch.bfloat16))
    ops: dict[str, Op] = {
        "ours": lambda x, lin: torch.ops.blink.int8_gemv(x, lin[0], lin[1]),
        "aten int8": lambda x, lin: torch.ops.aten._weight_int8pack_mm(x, lin[0], lin[1]),
    }
    if pack:
        ops["packed bf16"] = lambda x, lin: packed_linear(x, lin[2], None)
    step = make_step(pack)
    gb = sum(lin[0].numel() for lin in step) / 1e9
    print(f"{len(step)} linears per step, {gb * 1e3:.0f} MB int8 weights; ms per step (int8 GB/s)")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for m in (int(r) for r in args.rows.split(",")):
            xs = {k: torch.randn(m, k).to(torch.bfloat16) for k in (576, 1536)}
            times: dict[str, list[float]] = {name: [] for name in ops}
            for _ in range(args.reps):
                for name, op in ops.items():
                    times[name].append(step_time(op, step, xs, 2))
            med = {name: statistics.median(t) for name, t in times.items()}
            cols = "  ".join(f"{name} {t * 1e3:7.2f} ({gb / t:5.1f})" for name, t in med.items())
            ratios = "  ".join(f"{med[name] / med['ours']:.2f}x vs {name}" for name in med if name != "ours")
            print(f"threads={threads} M={m:2d}: {cols}  | ours {ratios}", flush=True)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
