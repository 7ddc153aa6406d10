"""int8 weight-only GEMV at 1-3 rows: aten ``_weight_int8pack_mm`` vs ``blink::int8_gemv``.

SmolLM2-135M's decode linears (7 per layer x 30 layers, distinct weights so nothing stays in
cache, ~106 MB) and its tied LM head (49152 x 576, 28 MB), bf16 activations, one call per
linear as in a decode step. A and B alternate ``--reps`` times per thread count so the
machine's drift hits both alike; prints ms per step, weight GB/s and ours/aten speed-up.

    python benchmarks/int8_gemv.py [--threads 1,2] [--rows 1] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from blink.engine.kernels.int8_gemv import int8_gemv_available

# SmolLM2-135M: hidden 576, 9 heads / 3 kv heads of 64 (q/o 576, k/v 192), intermediate 1536.
LAYER_SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
LAYERS = 30
HEAD = (49152, 576)

Weights = list[tuple[torch.Tensor, torch.Tensor]]


def make_weights() -> tuple[Weights, Weights]:
    g = torch.Generator().manual_seed(0)

    def one(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        return w, (torch.rand(n, generator=g) / 100).to(torch.bfloat16)

    return [one(n, k) for _ in range(LAYERS) for n, k in LAYER_SHAPES], [one(*HEAD)]


def step_time(
    op: Callable[..., torch.Tensor], weights: Weights, xs: dict[int, torch.Tensor], n: int
) -> float:
    """Seconds per pass over ``weights`` (best of ``n``: the floor is what the kernel can do)."""
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        for w, s in weights:
            op(xs[w.shape[1]], w, s)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if not int8_gemv_available():
        raise SystemExit("blink::int8_gemv is not available on this machine (see the log)")
    ours = torch.ops.blink.int8_gemv
    aten = torch.ops.aten._weight_int8pack_mm
    layers, head = make_weights()
    xs = {k: torch.randn(args.rows, k).to(torch.bfloat16) for k in (576, 1536)}
    for name, weights in (("30 layers", layers), ("LM head", head)):
        mb = sum(w.numel() for w, _ in weights) / 1e6
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            a: list[float] = []
            b: list[float] = []
            for _ in range(args.reps):
                a.append(step_time(aten, weights, xs, 3))
                b.append(step_time(ours, weights, xs, 3))
            ta, tb = statistics.median(a), statistics.median(b)
            print(
                f"{name:9s} M={args.rows} threads={threads}: aten {ta * 1e3:6.2f} ms ({mb / 1e3 / ta:5.1f} GB/s)"
                f"  ours {tb * 1e3:6.2f} ms ({mb / 1e3 / tb:5.1f} GB/s)  speed-up {ta / tb:.2f}x"
            )


if __name__ == "__main__":
    main()
