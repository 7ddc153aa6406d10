"""Speculative decoding at batch 1: decode tokens/s with speculation off vs on, same engine
config, same prompt, output checked identical, in one run.

    python benchmarks/spec_decode.py --threads 2 [--dtype bfloat16] [--quantization int8]

Random weights cannot rewrite a paragraph, so three rows are reported, each against the same
speculation-off baseline:
- ``ngram``: prompt-lookup proposals on the random model's own continuation of a repetitive
  prompt (acceptance is whatever this model produces: the honest floor);
- ``ngram-on-rewrite``: the n-gram proposer reading a context that contains the answer it is
  about to produce with small edits (every ``--edit-every``-th token changed), which is what a
  real model rewriting a given paragraph emits; the proposer is the real NgramProposer, only the
  context it searches is prepared;
- the cost of one verification forward of 1 + K tokens relative to a plain decode step.

fp32 by default: greedy output is token-for-token identical with speculation on. bf16 + int8
weights (``--dtype bfloat16 --quantization int8``, Blink's best CPU config) verifies through the
fused C++ decode step, which rounds a 1 + K span exactly as K + 1 one-row steps
(kernels/int8_matmul.h is batch-invariant), so the output is identical there too; with the step
switched off (``BLINK_FUSED_DECODE=off``) the eager span rounds otherwise and near-tied logits can
part. Off and on decode alternately (``--reps`` rounds; the speed-up is the median of the
per-round ratios, each of two runs back to back), and the verification
forward is timed interleaved with the one-token step, so the machine's drift hits both alike.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence as Seq
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import build, rand_prompt  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.model_runner import RunSpan  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402
from blink.engine.sequence import Sequence  # noqa: E402
from blink.engine.spec_decode.ngram import NgramProposer  # noqa: E402
from blink.engine.spec_decode.proposer import Proposal  # noqa: E402


class RewriteContextProposer:
    """NgramProposer searching ``reference`` (the answer with small edits) placed before the
    sequence, as if the prompt held the paragraph being rewritten."""

    def __init__(self, reference: list[int], ngram: NgramProposer) -> None:
        self.reference = reference
        self.ngram = ngram

    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        return [Proposal(self.ngram.lookup(self.reference + seq.output_token_ids, k)) for seq, k in requests]

    def release(self, request_id: str) -> None:
        return None


def decode_rate(engine: LLMEngine, prompt: list[int], n: int) -> tuple[float, list[int]]:
    """Tokens/s after the first token (TTFT excluded), and the tokens."""
    engine.add_request("r", prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    tokens: list[int] = []
    first = None
    while engine.has_unfinished():
        for o in engine.step():
            tokens.extend(o.new_token_ids)
            if first is None and tokens:
                first = time.perf_counter(), len(tokens)
    assert first is not None
    return (len(tokens) - first[1]) / (time.perf_counter() - first[0]), tokens


def same(want: list[int], got: list[int]) -> str:
    """"yes", or where the outputs part (bf16 logits can tie exactly; see RESULTS.md)."""
    diff = next((i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b), None)
    return "yes" if diff is None else f"no, from token {diff}"


def step_costs(engine: LLMEngine, ks: Seq[int], reps: int = 40) -> dict[int, float]:
    """Median ms of one forward over 1 + k tokens at a 256-token context, for each k, the sizes
    interleaved rep by rep."""
    runner = engine.runner
    table = list(range(0, 20))  # 20 blocks of 16 positions: the context and the span fit
    times: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(reps):
        for k in ks:
            t0 = time.perf_counter()
            runner.execute_spans([RunSpan("x", rand_prompt(1 + k, 1), 256, table, num_logits=1 + k)])
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(t) * 1000 for k, t in times.items()}


def alternate(engines: Seq[LLMEngine], prompt: list[int], n: int, reps: int) -> list[tuple[list[float], list[int]]]:
    """Each engine's decode rate in each of ``reps`` alternating rounds, and its tokens."""
    out: list[tuple[list[float], list[int]]] = [([], []) for _ in engines]
    for _ in range(reps):
        for i, engine in enumerate(engines):
            rate, tokens = decode_rate(engine, prompt, n)
            out[i][0].append(rate)
            out[i] = (out[i][0], tokens)
    return out


def speedup(on: list[float], off: list[float]) -> float:
    """Median over rounds of on / off measured back to back (the machine's drift cancels)."""
    return statistics.median(a / b for a, b in zip(on, off, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--quantization", default="none", choices=["none", "int8", "int8-w8a8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--edit-every", type=int, default=12, help="one token in N of the rewrite differs")
    ap.add_argument("--reps", type=int, default=3, help="alternating off/on rounds")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = build(args.shape, Path(tmp), args.dtype)
        common = dict(model=str(path), dtype=args.dtype, threads=args.threads, max_model_len=2048,
                      kv_cache_memory_bytes=256 << 20, quantization=args.quantization,
                      # Each round prefills the whole prompt: a cached prefix would make later
                      # rounds prefill only the tail, which rounds otherwise in bf16.
                      enable_prefix_caching=False)
        off = LLMEngine(EngineConfig(**common), path)  # type: ignore[arg-type]
        on = LLMEngine(EngineConfig(**common, speculative="ngram", num_speculative_tokens=args.k), path)  # type: ignore[arg-type]
        paragraph = rand_prompt(60, 3)
        prompt = paragraph + rand_prompt(4, 4) + paragraph + rand_prompt(4, 5) + paragraph[:20]
        decode_rate(off, rand_prompt(16, 9), 4)  # warm-up
        decode_rate(on, rand_prompt(16, 9), 4)
        (offs, want), (ons, got) = alternate([off, on], prompt, args.tokens, args.reps)
        st = on.stats()
        print(f"## {args.shape} dtype={args.dtype} quantization={args.quantization} threads={args.threads} K={args.k} "
              f"fused_step={off.runner.fused_decode}; tok/s: median of {args.reps} rounds, vs off: median of "
              "per-round ratios")
        print(f"{'workload':28s} {'tok/s':>8s} {'vs off':>8s} {'accept':>7s} {'tok/step':>9s} identical")
        print(f"{'speculation off':28s} {statistics.median(offs):8.1f} {1.0:7.2f}x {'-':>7s} {1.0:9.2f} -")
        print(f"{'ngram (random model)':28s} {statistics.median(ons):8.1f} {speedup(ons, offs):7.2f}x "
              f"{st.spec_acceptance_rate:7.2f} {st.spec_tokens_per_step:9.2f} {same(want, got)}")
        rng = random.Random(0)
        reference = [t if (i + 1) % args.edit_every else rng.randrange(3, 500) for i, t in enumerate(want)]
        rw = LLMEngine(EngineConfig(**common, speculative="ngram", num_speculative_tokens=args.k), path)  # type: ignore[arg-type]
        assert rw.speculator is not None
        rw.speculator.proposer = RewriteContextProposer(reference, NgramProposer())
        decode_rate(rw, rand_prompt(16, 9), 4)
        (offs, want), (rws, got_rw) = alternate([off, rw], prompt, args.tokens, args.reps)
        st = rw.stats()
        rw_speedup = speedup(rws, offs)
        print(f"{'ngram-on-rewrite (1/' + str(args.edit_every) + ' edited)':28s} {statistics.median(rws):8.1f} "
              f"{rw_speedup:7.2f}x {st.spec_acceptance_rate:7.2f} {st.spec_tokens_per_step:9.2f} "
              f"{same(want, got_rw)}   (off alongside: {statistics.median(offs):.1f} tok/s)")
        cost = step_costs(off, sorted({0, 2, 5, 8, args.k}))
        print(f"\nverification forward at 256 context, ms (ratio to the 1-token step): 1 token {cost[0]:.2f}; "
              + "; ".join(f"{1 + k} tokens {cost[k]:.2f} ({cost[k] / cost[0]:.2f}x)" for k in (2, 5, 8)))
        print(f"\nspeed-up, n-gram on the rewrite workload: {rw_speedup:.2f}x (goal >= 2x), identical "
              f"output: {same(want, got_rw)}; verification of 1 + {args.k} tokens costs "
              f"{cost[args.k] / cost[0]:.2f}x a one-token step")

if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
