"""Every int8 GEMM route torch offers for one W8A8 prefill linear, end to end (issue #23).

One linear as ``int8-w8a8`` runs it: bf16 activations ``[M, K]`` in, bf16 ``[M, N]`` out, one
symmetric scale per activation row and per weight channel (layers/linear_int8.py), so each
route includes the passes it needs around its GEMM. Routes:

  (a)  ``int_mm``: ``blink::quantize_rows`` + ``torch._int_mm`` on the transposed view of the
       ``[N, K]`` int8 weight + ``blink::dequant_rows`` (what Blink ran before this benchmark);
  (a2) ``int_mm_kn``: the same on a ``[K, N]``-contiguous copy of the weight;
  (b)  ``qlinear_u8``: oneDNN's int8 matmul through torch's x86 quantization ops
       (``onednn.qlinear_prepack`` / ``qlinear_pointwise``): activations quantized as uint8
       codes + 128 (zero point 128), unit scales, fp32 out (= float(int32 sum)), then
       ``dequant_rows`` applies both scales. Signed int8 activations on the same packed weight
       run oneDNN's reference kernel (``ref_int8``, ~1000x slower): shown in the verbose table;
  (c)  ``dynamic_<engine>``: ``quantized::linear_dynamic`` (fp32 in/out, one activation scale per
       tensor: not Blink's numerics; for the record) on the fbgemm / onednn engines;
  (d)  ``bf16_packed``: the bf16 linear on oneDNN's pre-packed weight (layers/packed_linear.py),
       the reference speed;
  (e)  ``int8pack_mm``: aten ``_weight_int8pack_mm`` (bf16 activations, int8 weights; for the record).

One thread is timed in the thread's CPU time (a loaded machine's preemption left out), more in
wall time. Routes run alternately in every round, so a loaded machine's drift hits all alike; each route
gets the median and the floor (minimum) over rounds of its per-round best of ``--calls``, and
ratios of route (a)'s time over the route's (> 1: faster than today; on a loaded machine read
the floors). The exact routes' outputs are checked equal to (a)'s.
A child process with ``ONEDNN_VERBOSE=1`` then prints which oneDNN implementation each route ran
(e.g. ``brg_matmul:avx512_core_vnni``, or ``...amx`` on a CPU with AMX; ``gemm_api`` names none).

``--prefill N`` then times the whole prefill (TTFT of one N-token prompt, in process) of a random
SmolLM2-135M-shape checkpoint with ``int8-w8a8`` on each GEMM (``w8a8_gemm: int_mm`` vs
``onednn``, one engine each, alternated), after checking both generate the same greedy tokens.

    python benchmarks/int8_gemm_routes.py                    # threads 1,2; M 256,1024 (~3 min quiet)
    python benchmarks/int8_gemm_routes.py --quick            # one shape, few rounds (~20 s)
    python benchmarks/int8_gemm_routes.py --threads 1,2 --prefill 1024   # + TTFT per GEMM (~5 min)
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

from blink.engine.cpu_features import read_cpu_features
from blink.engine.kernels.w8a8 import w8a8_available
from blink.engine.layers.linear_int8 import quantize_per_channel
from blink.engine.layers.packed_linear import pack_weight

# SmolLM2-135M's prefill linears as (K, N): qkv, o, gate_up, and down (dense bf16 in the mode,
# timed too since a faster int8 route could take it back).
SHAPES = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
Route = Callable[[], torch.Tensor]


def make_routes(m: int, k: int, n: int, engines: list[str]) -> tuple[dict[str, Route], set[str]]:
    """The timed calls for one linear, and the names of those that must equal route (a) exactly."""
    g = torch.Generator().manual_seed(m * 7 + k * 3 + n)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, generator=g) * 0.05
    q, w_scales = quantize_per_channel(w)
    q_kn = q.t().contiguous()
    packed_q = torch.ops.onednn.qlinear_prepack(q, [m, k])
    ones, zeros = torch.ones(n), torch.zeros(n, dtype=torch.long)
    blink = torch.ops.blink

    def int_mm(weight: torch.Tensor) -> Route:
        def run() -> torch.Tensor:
            xq, xs = blink.quantize_rows(x)
            return blink.dequant_rows(torch._int_mm(xq, weight), xs, w_scales, None, False)
        return run

    def qlinear_u8() -> torch.Tensor:
        xu, xs = blink.quantize_rows(x, None, True)
        acc = torch.ops.onednn.qlinear_pointwise(xu, 1.0, 128, packed_q, ones, zeros, None, 1.0, 0,
                                                 torch.float32, "none", [], "")
        return blink.dequant_rows(acc, xs, w_scales, None, False)

    routes: dict[str, Route] = {"int_mm": int_mm(q.t()), "int_mm_kn": int_mm(q_kn), "qlinear_u8": qlinear_u8}
    with warnings.catch_warnings():  # quantized tensors are deprecated; this route is for the record
        warnings.simplefilter("ignore")
        qw = torch.quantize_per_channel(w, w_scales.double(), torch.zeros(n, dtype=torch.long), 0, torch.qint8)
    for engine in engines:
        torch.backends.quantized.engine = engine
        dyn = torch.ops.quantized.linear_prepack(qw, None)
        routes[f"dynamic_{engine}"] = (
            lambda dyn=dyn: torch.ops.quantized.linear_dynamic(x.float(), dyn, False).to(torch.bfloat16))
    packed = pack_weight((q.float() * w_scales[:, None]).to(torch.bfloat16))
    routes["bf16_packed"] = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    bf16_scales = w_scales.to(torch.bfloat16)
    routes["int8pack_mm"] = lambda: torch.ops.aten._weight_int8pack_mm(x, q, bf16_scales)
    return routes, {"int_mm_kn", "qlinear_u8"}


def dynamic_engines() -> list[str]:
    """The quantized engines ``linear_dynamic`` can run on here (fbgemm and oneDNN's, when built)."""
    return [e for e in ("fbgemm", "onednn") if e in torch.backends.quantized.supported_engines]


def time_shape(m: int, k: int, n: int, rounds: int, calls: int,
               clock: Callable[[], float]) -> tuple[dict[str, list[float]], list[str]]:
    """Each route's best-of-``calls`` ms per round on ``clock``; and the exact routes that
    differed from (a)."""
    routes, exact = make_routes(m, k, n, dynamic_engines())
    ref = routes["int_mm"]()
    mismatched = [name for name in sorted(exact) if not torch.equal(routes[name](), ref)]
    samples: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(rounds):
        for name, fn in routes.items():
            fn()
            best = float("inf")
            for _ in range(calls):
                t = clock()
                fn()
                best = min(best, clock() - t)
            samples[name].append(best * 1000)
    return samples, mismatched


_VERBOSE_MARK = "@@ route "


def verbose_child(m: int) -> None:
    """Run each route once (after one warm-up) per shape, printing a marker before each, so the
    parent can tell which oneDNN lines belong to which route. Signed int8 activations on the
    qlinear weight run at a small M: oneDNN's reference kernel takes minutes at full size."""
    libc = ctypes.CDLL(None)

    def mark(name: str) -> None:
        # oneDNN writes with C stdio, buffered apart from Python's when piped: flush both in order.
        libc.fflush(None)
        print(_VERBOSE_MARK + name, flush=True)

    torch.set_num_threads(1)
    for k, n in SHAPES[:1]:
        routes, _ = make_routes(m, k, n, dynamic_engines())
        for name, fn in routes.items():
            fn()
            mark(name)
            fn()
            mark("")
        xq = torch.randint(-127, 128, (16, k), dtype=torch.int8)
        qw = torch.ops.onednn.qlinear_prepack(torch.randint(-127, 128, (n, k), dtype=torch.int8), [16, k])
        mark("qlinear_s8 (16 rows)")
        torch.ops.onednn.qlinear_pointwise(xq, 1.0, 0, qw, torch.ones(n), torch.zeros(n, dtype=torch.long), None,
                                           1.0, 0, torch.float32, "none", [], "")
        mark("")


def implementations(m: int) -> str:
    """Markdown table: route -> the oneDNN primitives and implementations its timed call ran."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"}
    proc = subprocess.run([sys.executable, __file__, "--verbose-child", "--m", str(m)], env=env, text=True,
                          capture_output=True, timeout=600, check=False)
    counts: dict[str, Counter[str]] = {}
    route = ""
    for line in proc.stdout.splitlines():
        if line.startswith(_VERBOSE_MARK):
            route = line[len(_VERBOSE_MARK):]
            if route:
                counts[route] = Counter()
            continue
        parts = line.split(",")
        if route and line.startswith(("onednn_verbose", "dnnl_verbose")) and "exec" in parts:
            i = parts.index("exec")  # exec,<engine>,<primitive kind>,<implementation>,...
            if len(parts) > i + 3:
                counts[route][f"{parts[i + 2]}: {parts[i + 3] or '(unnamed)'}"] += 1
    out = [f"| route ({m}x{SHAPES[0][0]}x{SHAPES[0][1]}, 1 call) | oneDNN primitive: implementation (count) |",
           "|---|---|"]
    for name, c in counts.items():
        out.append(f"| {name} | " + ("; ".join(f"{k} ({v})" for k, v in c.most_common()) or "no oneDNN primitive")
                   + " |")
    if proc.returncode:
        out.append(f"\nverbose child failed (exit {proc.returncode}): {proc.stderr[-800:]}")
    return "\n".join(out)


def prefill_ab(threads: int, tokens: int, rounds: int) -> str:
    """TTFT of one ``tokens``-token prompt per W8A8 GEMM on a SmolLM2-135M-shape checkpoint
    (median of ``rounds``, alternated), and whether the two give the same greedy tokens."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_cpu import build, rand_prompt

    from blink.engine.config import EngineConfig
    from blink.engine.llm_engine import LLMEngine
    from blink.engine.sampling_params import SamplingParams

    clock = time.thread_time if threads == 1 else time.perf_counter
    with tempfile.TemporaryDirectory() as tmp:
        path = build("smollm2-135m", Path(tmp), "bfloat16")
        engines = {gemm: LLMEngine(EngineConfig(
            model=str(path), dtype="bfloat16", quantization="int8-w8a8", w8a8_gemm=gemm, threads=threads,
            max_model_len=2048, kv_cache_memory_bytes=1 << 29, max_num_batched_tokens=2048,
            enable_prefix_caching=False), path) for gemm in ("int_mm", "onednn")}
        greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
        same = len({str(e.generate([rand_prompt(300, 7)], greedy)) for e in engines.values()}) == 1
        ttft: dict[str, list[float]] = {gemm: [] for gemm in engines}
        for r in range(rounds + 1):
            for gemm, engine in engines.items():
                engine.add_request(f"p{r}", rand_prompt(tokens, 100 + r),
                                   SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
                t = clock()
                while engine.has_unfinished():
                    engine.step()
                if r:  # round 0 warms the primitives for this length
                    ttft[gemm].append((clock() - t) * 1000)
    med = {gemm: statistics.median(v) for gemm, v in ttft.items()}
    return (f"threads {threads} ({'thread CPU time' if threads == 1 else 'wall'}): TTFT @ {tokens} int_mm "
            f"{med['int_mm']:.1f} ms, onednn {med['onednn']:.1f} ms (int_mm / onednn = "
            f"{med['int_mm'] / med['onednn']:.2f}x); same greedy tokens: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rows", default="256,1024")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one shape (qkv), M=256, 3 rounds")
    parser.add_argument("--prefill", type=int, default=0, help="also time a prefill of this many tokens per GEMM")
    parser.add_argument("--verbose-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--m", type=int, default=1024, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not w8a8_available():
        sys.exit("blink's W8A8 kernels are not built here (no AVX-512 or no compiler)")
    if args.verbose_child:
        verbose_child(args.m)
        return
    shapes, rows, rounds = (SHAPES[:1], [256], 3) if args.quick else (SHAPES, [int(r) for r in args.rows.split(",")],
                                                                     args.rounds)
    print(f"CPU: {read_cpu_features().describe()}")
    print(f"torch {torch.__version__}, oneDNN {torch.backends.mkldnn.is_available()}, "
          f"quantized engines {torch.backends.quantized.supported_engines}")
    print(f"{rounds} alternated rounds, best of {args.calls} calls each; ms per linear, bf16 in -> bf16 out "
          "(ratio = int_mm's ms / the route's: > 1 is faster than today)\n")
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        # One thread: oneDNN computes on the calling thread, so its CPU time is the op's cost
        # without the time other processes take from it (what a loaded machine adds).
        clock, clock_name = (time.thread_time, "thread CPU time") if threads == 1 else (time.perf_counter, "wall")
        for m in rows:
            for k, n in shapes:
                samples, mismatched = time_shape(m, k, n, rounds, args.calls, clock)
                print(f"threads {threads} ({clock_name})  M {m}  K {k}  N {n}"
                      + (f"  NOT EXACT: {', '.join(mismatched)}" if mismatched else ""), flush=True)
                med = {name: statistics.median(v) for name, v in samples.items()}
                low = {name: min(v) for name, v in samples.items()}
                for name in samples:
                    print(f"  {name:15s} median {med[name]:8.3f} ms ({med['int_mm'] / med[name]:.2f}x)   "
                          f"floor {low[name]:8.3f} ms ({low['int_mm'] / low[name]:.2f}x)", flush=True)
    print("\n" + implementations(256 if args.quick else 1024))
    if args.prefill:
        print(f"\nint8-w8a8 prefill, SmolLM2-135M shape, {rounds} alternated rounds:")
        for threads in [int(t) for t in args.threads.split(",")]:
            print(prefill_ab(threads, args.prefill, rounds), flush=True)


if __name__ == "__main__":
    main()
