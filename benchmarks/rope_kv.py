"""blink::rope_write_kv (blink/engine/kernels/rope_kv.cpp) vs apply_rotary + write_kv, alternated.

Three figures, each "fused" (the kernel) against "torch" (the ops it replaces), in one process on
one engine (only the attention layers' ``fused_ops`` is toggled, so the other fused ops stay on):

1. per layer, the rope of q and k plus the K/V cache write alone, SmolLM2-135M's attention shape
   (9 query / 3 KV heads of 64), for a 1,024-token prefill chunk and a 16-row decode step;
2. TTFT of a 1,024-token prompt on a random SmolLM2-135M-shape checkpoint;
3. a 16-row decode step forced onto the eager path (``decode_gemm_rows=1``: the oneDNN GEMM
   path AMX hosts take from 8 rows on, with the per-layer Python loop and its ~20 torch calls),
   and the number of op events the profiler records in one such step (independent of load);
4. a profile of one prefill in each mode: the replaced ops' and the kernel's self CPU and calls.

    python benchmarks/rope_kv.py --threads 2 [--rounds 6] [--quantization int8-w8a8] [--quick]

Prints the CPU line, the medians and fused/torch ratios. Rounds alternate the order (ABBA).
``--clock thread`` (with ``--threads 1``: every op then runs on the calling thread) times the
calling thread's CPU time instead of wall time, which other processes on a loaded machine do not
inflate (descheduled time is not counted; cache and memory-bandwidth contention still are).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import build, rand_prompt  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.kernels.rope_kv import rope_kv_available, rope_write_kv  # noqa: E402
from blink.engine.kv_cache_dtype import write_kv  # noqa: E402
from blink.engine.layers.rope import RopeSpec, RotaryEmbedding, apply_rotary  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.models.llama import LlamaAttention  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

HEADS, KV_HEADS, DIM = 9, 3, 64  # SmolLM2-135M
NAMES = ("fused", "torch")
# time.perf_counter (wall) or time.thread_time (the calling thread's CPU time), set by --clock.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}


def alternate(rounds: int, measure: Callable[[str, int], float]) -> dict[str, list[float]]:
    """``measure(name, round)`` for both names each round, the order flipped every round."""
    got: dict[str, list[float]] = {n: [] for n in NAMES}
    for r in range(rounds):
        for name in NAMES if r % 2 == 0 else NAMES[::-1]:
            got[name].append(measure(name, r))
    return got


def report(label: str, unit: str, got: dict[str, list[float]]) -> None:
    fused, eager = statistics.median(got["fused"]), statistics.median(got["torch"])
    digits = 0 if unit == "ops" else 3
    print(f"| {label} | {eager:.{digits}f} {unit} | {fused:.{digits}f} {unit} | {fused / eager:.2f}x |", flush=True)


def layer_op(
    tokens: int, dtype: torch.dtype, rounds: int, reps: int, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """ms per layer of rope(q, k) + the K/V write, the layer's tensors laid out as LlamaAttention's."""
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * DIM).to(dtype)
    q, k, v = qkv.split([HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM], dim=-1)
    q, k, v = q.view(tokens, HEADS, DIM), k.view(tokens, KV_HEADS, DIM), v.view(tokens, KV_HEADS, DIM)
    table = RotaryEmbedding(RopeSpec(head_dim=DIM, theta=100000.0, max_position_embeddings=4096), 4096)
    cos, sin = table.lookup(torch.arange(100, 100 + tokens), dtype)
    caches = torch.zeros(2, 4096 // 16 + 1, 16, KV_HEADS, DIM, dtype=dtype)
    slots = torch.randperm(4096)[:tokens]
    k_flat, v_flat = caches[0].view(-1, KV_HEADS, DIM), caches[1].view(-1, KV_HEADS, DIM)

    def eager() -> None:
        qk = qkv[:, : (HEADS + KV_HEADS) * DIM].view(tokens, -1, DIM)
        _, k_rot = apply_rotary(qk, cos, sin).split([HEADS, KV_HEADS], dim=1)
        write_kv(k_flat, slots, k_rot)
        write_kv(v_flat, slots, v)

    def fused() -> None:
        rope_write_kv(q, k, v, cos, sin, slots, caches[0], caches[1])

    calls = {"fused": fused, "torch": eager}

    def measure(name: str, _: int) -> float:
        call = calls[name]
        call()
        t0 = clock()
        for _ in range(reps):
            call()
        return (clock() - t0) * 1000 / reps

    with torch.inference_mode():
        return alternate(rounds, measure)


def use(engine: LLMEngine, name: str) -> None:
    for module in engine.runner.model.modules():  # type: ignore[attr-defined]
        if isinstance(module, LlamaAttention):
            module.fused_ops = name == "fused"


def ttft_ms(engine: LLMEngine, prompt: list[int], rid: str, clock: Callable[[], float]) -> float:
    t0 = clock()
    engine.add_request(rid, prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return (clock() - t0) * 1000


def decode_step_ms(engine: LLMEngine, name: str, streams: int, steps: int, tag: str,
                   clock: Callable[[], float]) -> float:
    """Median ms of ``steps`` decode-only steps of ``streams`` rows (prefills run first, untimed)."""
    params = SamplingParams(max_tokens=steps + 4, temperature=0.0, ignore_eos=True)
    for i in range(streams):
        engine.add_request(f"{tag}-{i}", rand_prompt(32, 7000 + i), params)
    use(engine, name)
    engine.step()  # the streams' prefills (one chunk for all: 16 x 32 tokens)
    engine.step()
    times = []
    for _ in range(steps):
        t0 = clock()
        engine.step()
        times.append((clock() - t0) * 1000)
    while engine.has_unfinished():
        engine.step()
    return statistics.median(times)


def ops_per_step(engine: LLMEngine, name: str, streams: int) -> int:
    """Profiler op events (aten and blink ops, nested ones included) in one eager decode step of
    ``streams`` rows: a dispatch count that load does not change."""
    from torch.profiler import ProfilerActivity, profile

    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    for i in range(streams):
        engine.add_request(f"ops-{name}-{i}", rand_prompt(32, 7000 + i), params)
    use(engine, name)
    engine.step()
    engine.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.step()
    while engine.has_unfinished():
        engine.step()
    return sum(e.count for e in prof.key_averages() if "::" in e.key)


ROPE_OPS = ("aten::mul", "aten::sub", "aten::add", "aten::cat", "aten::index_copy_", "blink::rope_write_kv")


def prefill_profile(engine: LLMEngine, tokens: int) -> None:
    """Self CPU of the ops the kernel replaces (and its own) in one ``tokens`` prefill, each mode."""
    from torch.profiler import ProfilerActivity, profile

    print(f"\nOne {tokens}-token prefill under the profiler, self CPU ms (calls):\n")
    print("| op | " + " | ".join(NAMES) + " |\n|---|---|---|")
    rows: dict[str, dict[str, str]] = {op: {} for op in (*ROPE_OPS, "total (all ops)")}
    for name in NAMES:
        use(engine, name)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            ttft_ms(engine, rand_prompt(tokens, 4242), f"prof-{name}", time.perf_counter)
        events = {e.key: e for e in prof.key_averages()}
        for op in ROPE_OPS:
            e = events.get(op)
            rows[op][name] = f"{e.self_cpu_time_total / 1000:.1f} ({e.count})" if e else "-"
        total = sum(e.self_cpu_time_total for e in events.values()) / 1000
        rows["total (all ops)"][name] = f"{total:.1f}"
    for op, cells in rows.items():
        print(f"| {op} | " + " | ".join(cells[n] for n in NAMES) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--quantization", default="int8-w8a8", help="the engine's, for the TTFT and decode figures")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=1024, help="TTFT prompt tokens")
    ap.add_argument("--quick", action="store_true", help="2 rounds, fewer repetitions: proves the script runs")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="thread: CPU time, with --threads 1")
    args = ap.parse_args()
    if args.clock == "thread" and args.threads != 1:
        raise SystemExit("--clock thread needs --threads 1 (other threads' CPU time would not be counted)")
    clock = CLOCKS[args.clock]
    rounds = 2 if args.quick else args.rounds
    torch.set_num_threads(args.threads)
    if not rope_kv_available():
        raise SystemExit("blink::rope_write_kv is not built here (needs AVX-512 and a compiler)")
    print(f"- CPU: {read_cpu_features().describe()}")
    print(f"- torch {torch.__version__}, threads {args.threads}, {rounds} alternating rounds, medians, "
          f"{args.clock} clock\n")
    print("| figure | torch ops | fused kernel | fused / torch |\n|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        for tokens in (1024, 16):
            reps = (20 if tokens > 100 else 500) // (5 if args.quick else 1)
            got = layer_op(tokens, dtype, rounds, reps, clock)
            report(f"rope + K/V write per layer, {tokens} rows, {str(dtype)[6:]}", "ms", got)
    with tempfile.TemporaryDirectory() as tmp:
        path = build("smollm2-135m", Path(tmp), "bfloat16")
        cfg = EngineConfig(model=str(path), dtype="bfloat16", threads=args.threads, max_model_len=2048,  # type: ignore[arg-type]
                           kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
                           enable_prefix_caching=False, quantization=args.quantization, decode_gemm_rows=1)
        engine = LLMEngine(cfg, path)
        for name in NAMES:
            use(engine, name)
            ttft_ms(engine, rand_prompt(64, 99), f"warm-{name}", clock)

        def ttft(name: str, r: int) -> float:
            use(engine, name)
            return ttft_ms(engine, rand_prompt(args.prompt, 1000 + r), f"ttft-{name}-{r}", clock)

        report(f"TTFT @ {args.prompt}, SmolLM2 shape, bf16 {args.quantization}", "ms", alternate(rounds, ttft))
        steps = 4 if args.quick else 12
        got = alternate(rounds, lambda name, r: decode_step_ms(engine, name, args.streams, steps,
                                                               f"dec-{name}-{r}", clock))
        report(f"eager {args.streams}-row decode step (decode_gemm_rows=1), bf16 {args.quantization}", "ms", got)
        counts = {name: [float(ops_per_step(engine, name, args.streams))] for name in NAMES}
        layers = engine.runner.model.shape.num_layers  # type: ignore[attr-defined]
        report(f"op events in that step ({layers} layers)", "ops", counts)
        prefill_profile(engine, args.prompt)


if __name__ == "__main__":
    main()
