"""Blink's embedded engine vs ``transformers.generate`` on the CPU, side by side in one run.

Same random checkpoint for both (SmolLM2-135M's shape by default, Qwen2.5-0.5B's with
``--shapes``), same threads. Prints TTFT at 32/256/1024 prompt tokens, batch-1 decode
tokens/s, aggregate tokens/s with 16 concurrent streams, and the TTFT of a request whose
1024-token prefix is cached, each with its ratio to transformers.

    python benchmarks/engine_cpu.py --threads 2 [--shapes smollm2-135m,qwen2.5-0.5b] [--dtype bfloat16]

``--ab-prepack ROUNDS`` instead compares Blink with its bf16 weights pre-packed for oneDNN (the
default, blink/engine/layers/packed_linear.py) against the same engine with plain ``F.linear``,
alternating the two ROUNDS times in one run (TTFT at each length + 16-stream tok/s; ~2 min).
``--ab-kernels ROUNDS`` compares our attention kernels (blink/engine/kernels/prefill_attention.cpp
and decode_attention.cpp, the default where they build) against aten SDPA on one engine,
alternating (TTFT, 16-stream tok/s and tok per CPU-s, batch-1 decode tok/s; ~2 min for 3 rounds).
``--ab-kv-cache ROUNDS`` compares fp8 (e4m3) and int8 KV caches (``--kv-cache-dtypes``) with the
model-dtype one (an engine each, same byte budget): decode tok/s of 16 streams at 1,900 cached
tokens each and of one such stream, alternating ROUNDS times, plus the pools' block capacity ratio.
With ``--ab-fused`` (and ``--quantization int8``) it compares, per cache dtype, the fused C++ decode
step with the eager per-layer path instead.
``--ab-prefill-ops ROUNDS`` (``--dtype bfloat16``, any ``--quantization``) compares the fused bf16
elementwise ops (blink/engine/kernels/prefill_ops.cpp: residual + RMSNorm, silu * up) with aten's
on one engine, toggled (the layers' ``fused_ops``) and alternated (TTFT, 16-stream and batch-1 tok/s).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from blink.demo.tiny import build_tiny_checkpoint
from blink.engine.config import EngineConfig
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams

SHAPES: dict[str, dict[str, object]] = {
    # From the public config.json files of the two checkpoints.
    "smollm2-135m": dict(arch="llama", hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3,
                         intermediate_size=1536, tie_word_embeddings=True, vocab_size=49152,
                         rope_theta=100000.0),
    "qwen2.5-0.5b": dict(arch="qwen2", hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                         intermediate_size=4864, tie_word_embeddings=True, vocab_size=151936,
                         rope_theta=1000000.0),
}


@dataclass
class Figures:
    ttft_ms: dict[int, float]
    decode_tok_s: float
    agg16_tok_s: float
    cached_prefix_ttft_ms: float | None = None
    cold_prefix_ttft_ms: float | None = None


def build(shape: str, root: Path, dtype: str) -> Path:
    s = dict(SHAPES[shape])
    arch = str(s.pop("arch"))
    vocab = s.pop("vocab_size")
    rope_theta = s.pop("rope_theta")
    return build_tiny_checkpoint(root / shape, arch, max_position_embeddings=2048, dtype=dtype,  # type: ignore[arg-type]
                                 extra_config={"vocab_size": vocab, "rope_theta": rope_theta}, **s)  # type: ignore[arg-type]


def rand_prompt(n: int, seed: int, vocab: int = 500) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def run_together(eng: LLMEngine, prompts: list[list[int]], n: int) -> tuple[float, float | None, int]:
    """(start, first token time, tokens) of ``prompts`` run together, greedy, to ``n`` tokens each."""
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        eng.add_request(f"r{time.perf_counter_ns()}-{i}", p,
                        SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    first, total = None, 0
    while eng.has_unfinished():
        for o in eng.step():
            total += len(o.new_token_ids)
            if first is None and total:
                first = time.perf_counter()
    return t0, first, total


# -- Blink ----------------------------------------------------------------------------------

def blink_ttft(engine: LLMEngine, prompt: list[int], rid: str) -> float:
    t0 = time.perf_counter()
    engine.add_request(rid, prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return (time.perf_counter() - t0) * 1000


def blink_figures(path: Path, dtype: str, threads: int, lengths: list[int], decode_tokens: int,
                  streams: int, stream_tokens: int) -> Figures:
    cfg = dict(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,
               kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64)
    eng = LLMEngine(EngineConfig(**cfg, enable_prefix_caching=False), path)  # type: ignore[arg-type]
    blink_ttft(eng, rand_prompt(16, 99), "warm")
    ttft = {n: statistics.median(blink_ttft(eng, rand_prompt(n, 1000 * n + i), f"t{n}-{i}") for i in range(3))
            for n in lengths}
    # Batch-1 decode: time per token after the first.
    prompt = rand_prompt(32, 5)
    eng.add_request("dec", prompt, SamplingParams(max_tokens=decode_tokens, temperature=0.0, ignore_eos=True))
    first = None
    t0 = time.perf_counter()
    got = 0
    while eng.has_unfinished():
        for o in eng.step():
            got += len(o.new_token_ids)
            if first is None:
                first = time.perf_counter()
    decode = (got - 1) / (time.perf_counter() - (first or t0))
    agg = streams_tok_s(eng, streams, stream_tokens, "")  # 16 concurrent streams
    del eng
    # Cached prefix: a 1024-token prefix seen before, 16 new tokens after it.
    eng = LLMEngine(EngineConfig(**cfg, enable_prefix_caching=True), path)  # type: ignore[arg-type]
    prefix = rand_prompt(1024, 4242)
    cold = statistics.median(
        blink_ttft(eng, rand_prompt(1024, 50 + i) + rand_prompt(16, 80 + i), f"cold{i}") for i in range(3))
    blink_ttft(eng, prefix + rand_prompt(16, 1), "fill")
    cached = statistics.median(blink_ttft(eng, prefix + rand_prompt(16, 2 + i), f"hit{i}") for i in range(3))
    return Figures(ttft, decode, agg, cached, cold)


def unpack(engine: LLMEngine) -> None:
    """Back to plain ``F.linear`` (drop every layer's oneDNN-packed weight copy)."""
    for module in engine.runner.model.modules():  # type: ignore[attr-defined]
        if getattr(module, "packed_weight", None) is not None:
            module.packed_weight = None


def streams_tok_s(engine: LLMEngine, streams: int, stream_tokens: int, tag: str) -> float:
    params = SamplingParams(max_tokens=stream_tokens, temperature=0.0, ignore_eos=True)
    t0 = time.perf_counter()
    for i in range(streams):
        engine.add_request(f"{tag}s{i}", rand_prompt(32, 7000 + i), params)
    total = 0
    while engine.has_unfinished():
        for o in engine.step():
            total += len(o.new_token_ids)
    return total / (time.perf_counter() - t0)


def ab_prepack(path: Path, dtype: str, threads: int, lengths: list[int], streams: int,
               stream_tokens: int, rounds: int) -> None:
    """Packed vs plain bf16 linears, alternating, one engine each; prints medians and ratios."""
    cfg = dict(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,
               kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
               enable_prefix_caching=False)
    engines = {"packed": LLMEngine(EngineConfig(**cfg), path), "plain": LLMEngine(EngineConfig(**cfg), path)}  # type: ignore[arg-type]
    unpack(engines["plain"])
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in engines}
    for name, eng in engines.items():
        blink_ttft(eng, rand_prompt(16, 99), f"warm-{name}")
    for r in range(rounds):
        for name, eng in (engines.items() if r % 2 == 0 else reversed(engines.items())):
            for n in lengths:
                figures[name].setdefault(f"TTFT ms @ {n}", []).append(
                    blink_ttft(eng, rand_prompt(n, 1000 * n + r), f"{name}{r}-{n}"))
            figures[name].setdefault(f"{streams}-stream tok/s", []).append(
                streams_tok_s(eng, streams, stream_tokens, f"{name}{r}"))
    print_ab(f"prepacked bf16 linears vs plain F.linear, {rounds} alternating rounds, threads={threads}",
             "packed", "plain", figures)


def batch1_decode_tok_s(engine: LLMEngine, tokens: int, tag: str) -> float:
    """Batch-1 decode tokens/s after the first token (32-token prompt)."""
    engine.add_request(f"{tag}d", rand_prompt(32, 5), SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    first, got = None, 0
    while engine.has_unfinished():
        for o in engine.step():
            got += len(o.new_token_ids)
            if first is None:
                first = time.perf_counter()
    return (got - 1) / (time.perf_counter() - (first or time.perf_counter()))


def ab_kernels(path: Path, dtype: str, threads: int, lengths: list[int], streams: int, stream_tokens: int,
               decode_tokens: int, rounds: int) -> None:
    """Our attention kernels (blink::prefill_attention_cpu + decode_attention_cpu, the default where
    they build) vs aten SDPA (+ gather), toggled on one engine and alternated; prints medians of
    TTFT, wall tok/s and tok per process-CPU-s (the CPU figure shrugs off other load)."""
    cfg = dict(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,
               kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
               enable_prefix_caching=False)
    eng = LLMEngine(EngineConfig(**cfg), path)  # type: ignore[arg-type]
    layers = eng.runner.model.attention_layers()  # type: ignore[attr-defined]
    runner = eng.runner  # type: ignore[attr-defined]
    if not runner.decode_kernel:
        raise SystemExit("blink::decode_attention_cpu is not available here (no AVX-512 or no compiler)")
    print(f"prefill kernel: {runner.prefill_kernel} (needs bf16 + AVX512-BF16), decode kernel: True")
    blink_ttft(eng, rand_prompt(16, 99), "warm")
    figures: dict[str, dict[str, list[float]]] = {"kernel": {}, "sdpa": {}}
    for r in range(rounds):
        for name in ("kernel", "sdpa") if r % 2 == 0 else ("sdpa", "kernel"):
            for attn in layers:
                attn.decode_kernel = name == "kernel"
                attn.prefill_kernel = name == "kernel" and runner.prefill_kernel
            for n in lengths:
                figures[name].setdefault(f"TTFT ms @ {n}", []).append(
                    blink_ttft(eng, rand_prompt(n, 1000 * n + r), f"{name}{r}-{n}"))
            cpu = time.process_time()
            figures[name].setdefault(f"{streams}-stream tok/s", []).append(
                streams_tok_s(eng, streams, stream_tokens, f"{name}{r}"))
            figures[name].setdefault(f"{streams}-stream tok/CPU-s", []).append(
                streams * stream_tokens / (time.process_time() - cpu))
            figures[name].setdefault("batch-1 decode tok/s", []).append(
                batch1_decode_tok_s(eng, decode_tokens, f"{name}{r}"))
    print_ab(f"attention kernels vs aten SDPA, {rounds} alternating rounds, threads={threads}",
             "kernel", "sdpa", figures)


def ab_prefill_ops(path: Path, dtype: str, threads: int, lengths: list[int], streams: int, stream_tokens: int,
                   decode_tokens: int, rounds: int, quantization: str) -> None:
    """The fused bf16 elementwise ops (kernels/prefill_ops.py: RMSNorm + residual, silu * up) vs
    aten's, toggled on one engine (its layers' ``fused_ops``, what ``prefill_ops: false`` sets) and alternated."""
    from blink.engine.kernels import prefill_ops

    if dtype != "bfloat16" or not prefill_ops.prefill_ops_available():
        raise SystemExit("the prefill ops serve bf16 models on AVX-512 CPUs with a compiler (--dtype bfloat16)")
    cfg = dict(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,
               kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
               enable_prefix_caching=False, quantization=quantization)
    eng = LLMEngine(EngineConfig(**cfg), path)  # type: ignore[arg-type]
    figures: dict[str, dict[str, list[float]]] = {"fused": {}, "aten": {}}

    def use(name: str) -> None:
        for module in eng.runner.model.modules():
            if hasattr(module, "fused_ops"):
                module.fused_ops = name == "fused"

    for name in figures:
        use(name)
        blink_ttft(eng, rand_prompt(16, 99), f"warm-{name}")
    for r in range(rounds):
        for name in ("fused", "aten") if r % 2 == 0 else ("aten", "fused"):
            use(name)
            for n in lengths:
                figures[name].setdefault(f"TTFT ms @ {n}", []).append(
                    blink_ttft(eng, rand_prompt(n, 1000 * n + r), f"{name}{r}-{n}"))
            figures[name].setdefault(f"{streams}-stream tok/s", []).append(
                streams_tok_s(eng, streams, stream_tokens, f"{name}{r}"))
            figures[name].setdefault("batch-1 decode tok/s", []).append(
                batch1_decode_tok_s(eng, decode_tokens, f"{name}{r}"))
    print_ab(f"fused bf16 elementwise ops vs aten, {rounds} alternating rounds, threads={threads}, "
             f"quantization={quantization}", "fused", "aten", figures)


def ab_kv_cache(path: Path, dtype: str, threads: int, streams: int, context: int, rounds: int,
                kinds: list[str], quantization: str, steps: int = 8, fused_ab: bool = False) -> None:
    """Quantized (``kinds``: fp8, int8) vs model-dtype KV cache, one engine each, same byte budget:
    each engine prefills ``streams`` distinct ``context``-token prompts once (untimed), then the
    engines decode ``steps`` steps in turn, alternating, so all read long contexts (where the
    cache's bytes, not the weights', dominate a step) in the same minutes; then one stream alone.
    With int8 weights the model-dtype engine runs its decodes as the fused C++ step (up to 32
    rows), for bf16, fp8 and int8 caches alike. ``fused_ab``: instead, each of ``kinds`` with the
    fused step (``fused_decode=True``) vs without it (the per-layer eager kernels), same cache."""
    cfg = dict(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,
               kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
               enable_prefix_caching=False, quantization=quantization)
    if fused_ab:
        engines = {f"{k} {mode}": LLMEngine(EngineConfig(**cfg, kv_cache_dtype=k, fused_decode=mode == "fused"), path)  # type: ignore[arg-type]
                   for k in kinds for mode in ("fused", "eager")}
    else:
        engines = {name: LLMEngine(EngineConfig(**cfg, kv_cache_dtype=name if name != dtype else "auto"), path)  # type: ignore[arg-type]
                   for name in [*kinds, dtype]}
    blocks = {name: eng.runner.num_blocks for name, eng in engines.items()}  # type: ignore[attr-defined]
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in engines}
    for batch in (streams, 1):
        params = SamplingParams(max_tokens=2 + rounds * steps, temperature=0.0, ignore_eos=True)
        for name, eng in engines.items():
            for i in range(batch):
                eng.add_request(f"{name}{batch}-{i}", rand_prompt(context, 9000 + i), params)
            while any(not s.num_output_tokens for s in eng.scheduler.running) or eng.scheduler.waiting:
                eng.step()  # prefill every stream (untimed)
        for r in range(rounds):
            for name, eng in (engines.items() if r % 2 == 0 else reversed(engines.items())):
                t0 = time.perf_counter()
                got = sum(len(o.new_token_ids) for _ in range(steps) for o in eng.step())
                figures[name].setdefault(f"decode tok/s, {batch} x {context} ctx", []).append(
                    got / (time.perf_counter() - t0))
        for eng in engines.values():
            while eng.has_unfinished():
                eng.step()
    if fused_ab:
        for kind in kinds:
            new, old = f"{kind} fused", f"{kind} eager"
            print_ab(f"fused decode step vs eager, {kind} KV cache, {quantization} weights, {rounds} alternating "
                     f"rounds of {steps} steps, threads={threads}", new, old, {new: figures[new], old: figures[old]})
        return
    for kind in kinds:
        print_ab(f"{kind} KV cache vs {dtype}, {quantization} weights, {rounds} alternating rounds of {steps} "
                 f"steps, threads={threads}",
                 kind, dtype, {kind: figures[kind], dtype: figures[dtype]})
        print(f"{'KV blocks (same bytes)':30s} {blocks[kind]:10d} {blocks[dtype]:10d} "
              f"{blocks[kind] / blocks[dtype]:7.2f}x")


def print_ab(title: str, new: str, old: str, figures: dict[str, dict[str, list[float]]]) -> None:
    """Medians of an A/B run, one row per figure; gain > 1 = ``new`` better (lower TTFT, more tok/s)."""
    print(f"\n## {title}")
    print(f"{'figure (median)':30s} {new:>10s} {old:>10s} {'gain':>8s}")
    for key in figures[new]:
        a, b = statistics.median(figures[new][key]), statistics.median(figures[old][key])
        gain = b / a if key.startswith("TTFT") else a / b
        print(f"{key:30s} {a:10.1f} {b:10.1f} {gain:7.2f}x")


# -- transformers ---------------------------------------------------------------------------

def hf_generate(model: torch.nn.Module, prompts: list[list[int]], n: int) -> float:
    ids = torch.tensor(prompts)
    t0 = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                       min_new_tokens=n, pad_token_id=0)
    return time.perf_counter() - t0


def hf_figures(path: Path, dtype: str, lengths: list[int], decode_tokens: int, streams: int,
               stream_tokens: int, sequential_sample: int) -> tuple[Figures, float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    hf_generate(model, [rand_prompt(16, 99)], 1)
    ttft = {n: statistics.median(hf_generate(model, [rand_prompt(n, 1000 * n + i)], 1) * 1000 for i in range(3))
            for n in lengths}
    t_total = hf_generate(model, [rand_prompt(32, 5)], decode_tokens)
    t_first = hf_generate(model, [rand_prompt(32, 5)], 1)
    decode = (decode_tokens - 1) / (t_total - t_first)
    # Sequential streams (what a naive server does): time a sample, scale to `streams`.
    per_stream = statistics.mean(hf_generate(model, [rand_prompt(32, 7000 + i)], stream_tokens)
                                 for i in range(sequential_sample))
    agg_seq = stream_tokens / per_stream
    # Batched generate (equal-length prompts, so no padding effects).
    t = hf_generate(model, [rand_prompt(32, 7000 + i) for i in range(streams)], stream_tokens)
    agg_batch = streams * stream_tokens / t
    return Figures(ttft, decode, agg_seq), agg_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="32,256,1024")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--stream-tokens", type=int, default=128)
    ap.add_argument("--sequential-sample", type=int, default=3, help="transformers streams timed for the sequential figure")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--ab-prepack", type=int, default=0, metavar="ROUNDS",
                    help="only compare packed vs plain bf16 linears, alternating ROUNDS times")
    ap.add_argument("--ab-kernels", type=int, default=0, metavar="ROUNDS",
                    help="only compare our attention kernels vs aten SDPA, alternating ROUNDS times")
    ap.add_argument("--ab-kv-cache", type=int, default=0, metavar="ROUNDS",
                    help="only compare quantized KV caches vs the model-dtype one at long context, alternating")
    ap.add_argument("--kv-cache-dtypes", default="fp8,int8", help="--ab-kv-cache: the quantized caches")
    ap.add_argument("--ab-fused", action="store_true",
                    help="--ab-kv-cache: fused decode step vs eager per cache dtype (auto = the model's) instead")
    ap.add_argument("--context", type=int, default=1900, help="--ab-kv-cache: cached tokens per stream")
    ap.add_argument("--ab-prefill-ops", type=int, default=0, metavar="ROUNDS",
                    help="only compare the fused bf16 elementwise ops (RMSNorm, silu * up) vs aten's, alternating")
    ap.add_argument("--quantization", default="none",
                    help="--ab-kv-cache, --ab-prefill-ops: weight quantization (none | int8 | ...)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            path = build(shape, Path(tmp), args.dtype)
            if args.ab_kv_cache:
                ab_kv_cache(path, args.dtype, args.threads, args.streams, args.context, args.ab_kv_cache,
                            args.kv_cache_dtypes.split(","), args.quantization, fused_ab=args.ab_fused)
                continue
            if args.ab_prefill_ops:
                ab_prefill_ops(path, args.dtype, args.threads, lengths, args.streams, args.stream_tokens,
                               args.decode_tokens, args.ab_prefill_ops, args.quantization)
                continue
            if args.ab_kernels:
                ab_kernels(path, args.dtype, args.threads, lengths, args.streams, args.stream_tokens,
                           args.decode_tokens, args.ab_kernels)
                continue
            if args.ab_prepack:
                ab_prepack(path, args.dtype, args.threads, lengths, args.streams, args.stream_tokens,
                           args.ab_prepack)
                continue
            b = blink_figures(path, args.dtype, args.threads, lengths, args.decode_tokens, args.streams,
                              args.stream_tokens)
            h, hf_batch = hf_figures(path, args.dtype, lengths, args.decode_tokens, args.streams,
                                     args.stream_tokens, args.sequential_sample)
            print(f"\n## {shape}  dtype={args.dtype}  threads={args.threads}")
            print(f"{'figure':38s} {'blink':>10s} {'transformers':>13s} {'ratio':>8s}")
            for n in lengths:
                print(f"{'TTFT ms @ ' + str(n):38s} {b.ttft_ms[n]:10.1f} {h.ttft_ms[n]:13.1f} "
                      f"{h.ttft_ms[n] / b.ttft_ms[n]:7.2f}x")
            print(f"{'batch-1 decode tok/s':38s} {b.decode_tok_s:10.1f} {h.decode_tok_s:13.1f} "
                  f"{b.decode_tok_s / h.decode_tok_s:7.2f}x")
            print(f"{f'{args.streams}-stream tok/s (hf sequential)':38s} {b.agg16_tok_s:10.1f} {h.agg16_tok_s:13.1f} "
                  f"{b.agg16_tok_s / h.agg16_tok_s:7.2f}x")
            print(f"{f'{args.streams}-stream tok/s (hf batched)':38s} {b.agg16_tok_s:10.1f} {hf_batch:13.1f} "
                  f"{b.agg16_tok_s / hf_batch:7.2f}x")
            assert b.cached_prefix_ttft_ms and b.cold_prefix_ttft_ms
            print(f"{'cached 1024-prefix TTFT ms (vs cold)':38s} {b.cached_prefix_ttft_ms:10.1f} "
                  f"{b.cold_prefix_ttft_ms:13.1f} {b.cold_prefix_ttft_ms / b.cached_prefix_ttft_ms:7.2f}x")
            results[shape] = {"blink": b.__dict__, "transformers": h.__dict__, "transformers_batched_tok_s": hf_batch}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
