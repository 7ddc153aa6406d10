"""The engine on a GPU, checked in one run (issue #24): exactness, speed beside transformers, versions.

1. Greedy output identical to ``transformers`` (fp32, same device) for tiny random Llama, Qwen2
   and Qwen3 models, one request at a time and 16 at once.
2. On a Qwen2.5-0.5B-shape random model in bf16: TTFT at 32/256/1024 prompt tokens, batch-1
   decode tokens/s and 64-stream aggregate tokens/s, each beside ``transformers`` on the same
   device (``generate`` with a static cache, and ``torch.compile(mode="reduce-overhead")`` — CUDA
   graphs — on a GPU), and the memory-bandwidth bound of batch-1 decode (weight bytes ÷ the
   device's measured copy bandwidth).
3. Versions: torch, CUDA, transformers, nvidia-smi.

Everything goes to ``--out`` (results.json, results.md) and is printed. ``--dry-run`` runs every
step small on the CPU, so the script is known to work before a GPU is lent:

    python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-dry
    benchmarks/gpu_check.sh   # on the GPU machine: installs the carried wheels, runs this, writes to $OUT
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blink.demo.tiny import build_tiny_checkpoint  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

QWEN05 = dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864,
              vocab_size=151936, extra_config={"rope_theta": 1000000.0})
DRY_SHAPE = dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256, vocab_size=512)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


def engine(path: Path, device: str, dtype: str, seqs: int, graphs: str = "auto") -> LLMEngine:
    # "auto" captures CUDA graphs for decode on a GPU; the dry run replays the same padded
    # buffers without a graph, so the padding is exercised on the CPU too.
    graphs = "replay" if graphs == "auto" and not device.startswith("cuda") else graphs
    cfg = EngineConfig(model=str(path), device=device, dtype=dtype, max_model_len=2048, max_num_seqs=seqs,
                       max_num_batched_tokens=4096, kv_cache_memory_bytes=2 << 30, enable_prefix_caching=False,
                       decode_graphs=graphs)
    return LLMEngine(cfg, path)


def blink_greedy(eng: LLMEngine, batch: list[list[int]], new: int, tag: str) -> list[list[int]]:
    params = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(batch):
        eng.add_request(f"{tag}{i}", p, params)
    out: dict[str, list[int]] = {f"{tag}{i}": [] for i in range(len(batch))}
    while eng.has_unfinished():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return [out[f"{tag}{i}"] for i in range(len(batch))]


def hf_model(path: Path, device: str, dtype: torch.dtype) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype).to(device).eval()


@torch.inference_mode()
def hf_greedy(model: Any, prompt: list[int], new: int, device: str) -> list[int]:
    ids = torch.tensor([prompt], device=device)
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def exactness(root: Path, device: str, new: int, count: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for arch in ("llama", "qwen2", "qwen3"):
        path = build_tiny_checkpoint(root / f"tiny-{arch}", arch, seed=3)  # type: ignore[arg-type]
        ref_model = hf_model(path, device, torch.float32)
        batch = prompts(count, 24, 500, seed=len(arch))
        ref = [hf_greedy(ref_model, p, new, device) for p in batch]
        eng = engine(path, device, "float32", count)
        seq = [blink_greedy(eng, [p], new, f"s{i}-")[0] for i, p in enumerate(batch)]
        conc = blink_greedy(eng, batch, new, "c")
        results[arch] = {"sequential_identical": sum(a == b for a, b in zip(seq, ref, strict=True)),
                         "concurrent_identical": sum(a == b for a, b in zip(conc, ref, strict=True)), "of": count}
        del eng, ref_model
    return results


def copy_bandwidth(device: str, mib: int) -> float:
    """Bytes read + written per second by one large device-to-device copy."""
    src = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    sync(device)
    return 2 * 5 * src.numel() / (time.perf_counter() - t0)


def decode_speed(eng: LLMEngine, decode: int, vocab: int, ttft_ms: float) -> float:
    t0 = time.perf_counter()
    blink_greedy(eng, prompts(1, 32, vocab, 5), decode, "d")
    dt = time.perf_counter() - t0
    return (decode - 1) / max(1e-9, dt - ttft_ms / 1000)


def blink_speed(path: Path, device: str, lengths: list[int], decode: int, streams: int, vocab: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    eng = engine(path, device, "bfloat16", max(64, streams))
    start_s = time.perf_counter() - t0
    graphs = eng.runner._graphs.num_graphs if eng.runner._graphs is not None else 0
    blink_greedy(eng, prompts(1, 16, vocab, 0), 2, "warm")
    ttft = {}
    for n in lengths:
        runs = []
        for i, p in enumerate(prompts(3, n, vocab, n)):
            sync(device)
            t0 = time.perf_counter()
            blink_greedy(eng, [p], 1, f"t{n}-{i}-")
            sync(device)
            runs.append((time.perf_counter() - t0) * 1000)
        ttft[n] = statistics.median(runs)
    decode_tok_s = decode_speed(eng, decode, vocab, ttft[min(lengths)])
    t0 = time.perf_counter()
    got = blink_greedy(eng, prompts(streams, 32, vocab, 7), decode, "m")
    agg = sum(len(g) for g in got) / (time.perf_counter() - t0)
    del eng
    # The same decode without graphs: what capturing buys.
    eager = engine(path, device, "bfloat16", max(64, streams), graphs="off")
    blink_greedy(eager, prompts(1, 16, vocab, 0), 2, "warm")
    eager_tok_s = decode_speed(eager, decode, vocab, ttft[min(lengths)])
    return {"ttft_ms": ttft, "decode_tok_s": decode_tok_s, "streams_tok_s": agg, "graphs": graphs,
            "engine_start_s": start_s, "decode_tok_s_without_graphs": eager_tok_s}


@torch.inference_mode()
def hf_speed(path: Path, device: str, lengths: list[int], decode: int, streams: int, vocab: int,
             compile_graphs: bool) -> dict[str, Any]:
    model = hf_model(path, device, torch.bfloat16)
    # With a static cache on a GPU, ``generate`` compiles its decode step itself with
    # ``mode="reduce-overhead"`` (CUDA graphs); prefill stays eager, as it does for every user.
    # Wrapping ``forward`` by hand as well would recompile per prompt length.
    kw = dict(do_sample=False, pad_token_id=0, cache_implementation="static", disable_compile=not compile_graphs)

    def gen(batch: list[list[int]], new: int) -> float:
        ids = torch.tensor(batch, device=device)
        sync(device)
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw)
        sync(device)
        return time.perf_counter() - t0

    # One new token runs prefill only (eager): no decode step is compiled for the TTFT shapes.
    for n in lengths:
        gen(prompts(1, n, vocab, 1), 1)
    ttft = {n: statistics.median(gen([p], 1) * 1000 for p in prompts(3, n, vocab, n)) for n in lengths}
    # Each timed decode run repeats its warm-up's exact shapes (the static cache's length
    # included), so the compiled, graph-captured decode step is reused, not recompiled.
    gen(prompts(1, 32, vocab, 5), decode)
    dt = gen(prompts(1, 32, vocab, 5), decode)
    decode_tok_s = (decode - 1) / max(1e-9, dt - ttft[min(lengths)] / 1000)
    gen(prompts(streams, 32, vocab, 7), decode)
    dt = gen(prompts(streams, 32, vocab, 7), decode)
    return {"ttft_ms": ttft, "decode_tok_s": decode_tok_s, "streams_tok_s": streams * decode / dt}


def versions(device: str) -> dict[str, Any]:
    import transformers

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "transformers": transformers.__version__, "python": sys.version.split()[0]}
    if device.startswith("cuda"):
        out["device_name"] = torch.cuda.get_device_name()
    smi = shutil.which("nvidia-smi")
    if smi:
        out["nvidia_smi"] = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
    return out


def report(res: dict[str, Any]) -> str:
    try:
        return _report(res)
    except (KeyError, TypeError, ZeroDivisionError) as exc:  # a section failed: the JSON still has the rest
        return f"(no full report: {type(exc).__name__}: {exc})\n" + json.dumps(res, indent=2, default=str)[:20000]


def _report(res: dict[str, Any]) -> str:
    lines = [f"device: {res['device']} ({'dry run' if res['dry_run'] else 'full'})", "", "## exactness (greedy vs transformers fp32)"]
    for arch, r in res["exactness"].items():
        lines.append(f"- {arch}: sequential {r['sequential_identical']}/{r['of']}, {r['of']} concurrent "
                     f"{r['concurrent_identical']}/{r['of']}")
    b, h = res["blink"], res["transformers"]
    lines += ["", "## speed, bf16", "| figure | Blink | transformers | Blink / transformers |", "|---|---|---|---|"]
    for n, ms in b["ttft_ms"].items():
        lines.append(f"| TTFT ms @ {n} | {ms:.1f} | {h['ttft_ms'][n]:.1f} | {h['ttft_ms'][n] / ms:.2f}x faster |")
    lines.append(f"| batch-1 decode tok/s | {b['decode_tok_s']:.1f} | {h['decode_tok_s']:.1f} | {b['decode_tok_s'] / h['decode_tok_s']:.2f}x |")
    lines.append(f"| {res['streams']}-stream tok/s | {b['streams_tok_s']:.1f} | {h['streams_tok_s']:.1f} | {b['streams_tok_s'] / h['streams_tok_s']:.2f}x |")
    lines.append(f"| batch-1 decode tok/s, decode graphs off | {b['decode_tok_s_without_graphs']:.1f} | | |")
    lines.append(f"\n{b['graphs']} decode graphs captured; engine start {b['engine_start_s']:.1f} s")
    lines.append(f"\nbatch-1 decode bound: {res['bound_tok_s']:.0f} tok/s ({res['weight_bytes'] / 1e9:.2f} GB of weights, "
                 f"copy bandwidth {res['copy_bandwidth_gbs']:.0f} GB/s); Blink reaches {b['decode_tok_s'] / res['bound_tok_s']:.0%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="every step small, on the CPU")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    device = args.device or ("cpu" if args.dry_run else "cuda")
    small = args.dry_run
    args.out.mkdir(parents=True, exist_ok=True)
    lengths = [8, 16] if small else [32, 256, 1024]
    decode, streams = (4, 2) if small else (128, 64)
    res: dict[str, Any] = {"device": device, "dry_run": small, "streams": streams}
    t0 = time.perf_counter()

    def step(key: str, run: Any) -> None:
        """One section; its result (or its error) is saved at once, so a run cut short by the
        machine's time limit still brings back every section that finished."""
        try:
            res[key] = run()
        except Exception as exc:  # noqa: BLE001 - a failed section is data; the others still run
            res.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        res["seconds"] = time.perf_counter() - t0
        (args.out / "results.json").write_text(json.dumps(res, indent=2, default=str))
        print(f"[{res['seconds']:.0f} s] {key}: {json.dumps(res.get(key, res.get('errors', {}).get(key)), default=str)[:2000]}",
              flush=True)

    step("versions", lambda: versions(device))
    with tempfile.TemporaryDirectory(prefix="blink-gpu-") as tmp:
        root = Path(tmp)
        step("exactness", lambda: exactness(root, device, 4 if small else 24, 4 if small else 16))
        shape = DRY_SHAPE if small else QWEN05
        path = build_tiny_checkpoint(root / "qwen05", "qwen2", dtype="bfloat16", **shape)  # type: ignore[arg-type]
        # Prompt ids stay inside the trained tokenizer's vocabulary (~16k), below the padded embedding.
        vocab = min(int(shape["vocab_size"]), 16000)  # type: ignore[call-overload]
        weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        res["weight_bytes"] = weights
        step("copy_bandwidth_gbs", lambda: copy_bandwidth(device, 64 if small else 2048) / 1e9)
        if "copy_bandwidth_gbs" in res:
            res["bound_tok_s"] = res["copy_bandwidth_gbs"] * 1e9 / weights
        step("blink", lambda: blink_speed(path, device, lengths, decode, streams, vocab))
        step("transformers", lambda: hf_speed(path, device, lengths, decode, streams, vocab, compile_graphs=not small))
    if res.get("errors"):
        print("errors:", json.dumps(res["errors"], indent=2))
    text = report(res)
    (args.out / "results.md").write_text(text + "\n")
    print(text)
    print(f"({res['seconds']:.0f} s; results in {args.out})")


if __name__ == "__main__":
    main()
