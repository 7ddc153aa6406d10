"""Where W8A8 loses quality on the real SmolLM2: per layer kind or index, smoothed or not, kept dense.

    python benchmarks/w8a8_sensitivity.py [--tokens 1024] [--agreement] [--configs "s,lm_head=o" "u" ...]

Engines on the GGUF ``blink serve`` falls back to offline, all bf16: ``int8-w8a8`` calibrated at
start (SmoothQuant, blink/engine/layers/smoothing.py) with every projection on W8A8, the same
unsmoothed (an empty calibration text), one per other SmoothQuant alpha named, and one
``int8-dense-prefill`` (for its dense bf16 weights). Each config then sets every linear of the
first engine's many-row path to

- ``s`` smoothed W8A8 (``s0.8``: smoothed with alpha 0.8), ``u`` unsmoothed W8A8,
- ``d`` the dense bf16 weight (int8-dense-prefill's path), ``o`` off (the int8 weight-only path),

a default letter followed by ``name-part=letter`` overrides (``down_proj``, ``qkv_proj``,
``o_proj``, ``gate_up_proj``, ``lm_head``, ``layers.7.`` ...; the first that matches wins), and
scores the prefill-path perplexity (128-token chunks, 512-token windows) of
benchmarks/data/newton_opticks_book1.txt, as real_model_quality.py does, and with ``--agreement``
the greedy answers to real_model_quality.py's 50 chat prompts (16 tokens; ``--max-num-seqs`` per
step, one continuous batch by default) against its cached ``transformers`` fp32 reference, and
with ``--quickstart`` its simple factual questions. Decode (1-16 rows) runs the int8 weight-only
path in every config. Neither figure depends on machine load.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_model_quality import (  # noqa: E402
    CHAT_PROMPTS,
    agreement,
    quickstart,
    transformers_reference,
    truncate_at_eos,
)

from blink.demo.default_model import fetch_smollm2  # noqa: E402
from blink.engine import llm_engine  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.layers import linear_int8  # noqa: E402
from blink.engine.layers.linear_int8 import Int8Linear  # noqa: E402
from blink.engine.perplexity import perplexity  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

TEXT = ROOT / "benchmarks" / "data" / "newton_opticks_book1.txt"
DEFAULT_CONFIGS = ["u", "s", "u,lm_head=o", "s,lm_head=o", "o",
                   *(f"s,lm_head=o,{kind}=o" for kind in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))]
REFERENCE = Path.home() / ".cache" / "blink" / "quality-reference.json"
# The many-row path's state of an Int8Linear: W8A8 weight, its scales, smoothing, dense, packed dense.
State = tuple[Any, Any, Any, Any, Any]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024, help="score the text's first N tokens (0 = all)")
    ap.add_argument("--agreement", action="store_true", help="also greedy answers vs the fp32 reference")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=64,
                    help="sequences per step in the greedy run (1: one request at a time; real_model_quality.py)")
    ap.add_argument("--quickstart", action="store_true", help="also real_model_quality.py's quickstart questions")
    ap.add_argument("--skip-perplexity", action="store_true")
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = fetch_smollm2()

    def engine(quantization: str = "int8-w8a8", **patches: Any) -> llm_engine.LLMEngine:
        # Every projection (the LM head aside) on the many-row path the config names, whatever
        # the mode's own default choice is: the configs below swap them one by one. W8A8 on
        # _int_mm on every CPU: the swaps move its weight (the oneDNN GEMM gives the same bits).
        config = EngineConfig(model=str(path), dtype="bfloat16", quantization=quantization, threads=args.threads,
                              max_model_len=2048, kv_cache_memory_bytes=96 << 20, enable_prefix_caching=False,
                              max_num_seqs=args.max_num_seqs, w8a8_gemm="int_mm")
        with mock.patch.object(linear_int8, "W8A8_DENSE_KINDS", ()):
            if "calibration" in patches:
                with mock.patch.object(llm_engine, "calibration_text", patches["calibration"]):
                    return llm_engine.LLMEngine(config, path)
            if "alpha" in patches:
                alpha = patches["alpha"]
                real = linear_int8.smoothing_factors
                with mock.patch.object(linear_int8, "smoothing_factors", lambda a, w, _=0.5: real(a, w, alpha)):
                    return llm_engine.LLMEngine(config, path)
            return llm_engine.LLMEngine(config, path)

    def state(e: llm_engine.LLMEngine) -> dict[str, State]:
        return {n: (m.w8a8_weight, m.w_scales, m.x_col_scale, m.dense, m.packed_dense)
                for n, m in e.runner.model.named_modules() if isinstance(m, Int8Linear)}

    target = engine()
    assert target.runner.smoothed_w8a8
    states: dict[str, dict[str, State]] = {"s": state(target)}
    letters = {r.split("=")[-1] for spec in args.configs for r in spec.split(",")}
    if "u" in letters:
        states["u"] = state(engine(calibration=lambda: ""))
    if "d" in letters:
        dense = state(engine("int8-dense-prefill"))
        states["d"] = {n: (None, None, None, d, p) for n, (_, _, _, d, p) in dense.items()}
    for letter in sorted(x for x in letters if x.startswith("s") and len(x) > 1):
        states[letter] = state(engine(alpha=float(letter[1:])))
    layers = {n: m for n, m in target.runner.model.named_modules() if isinstance(m, Int8Linear)}
    ids = target.tokenizer.encode(TEXT.read_text(), add_special_tokens=False)
    ids = ids[: args.tokens] if args.tokens else ids
    prompts = [target.tokenizer.apply_chat_template([{"role": "user", "content": p}]) for p in CHAT_PROMPTS]
    eos = target.tokenizer.eos_token_ids
    reference = transformers_reference(path, prompts, args.new_tokens, eos, REFERENCE) if args.agreement else []
    print(f"CPU: {read_cpu_features().describe()}; {len(ids)} tokens of {TEXT.name}\n")
    print("| config | ppl, prefill path | answers identical | tokens before first divergence | quickstart right |\n"
          "|---|---|---|---|---|")
    for spec in args.configs:
        default, *overrides = spec.split(",")
        rules = [tuple(o.split("=")) for o in overrides]
        for name, layer in layers.items():
            letter = next((v for k, v in rules if k in name), default)
            w, s, x, d, p = (None,) * 5 if letter == "o" else states[letter][name]
            layer.w8a8_weight, layer.w_scales, layer.x_col_scale, layer.dense, layer.packed_dense = w, s, x, d, p
        t0 = time.perf_counter()
        value = float("nan") if args.skip_perplexity else perplexity(target.runner, ids, 512, 128).value
        agree = "- | -"
        if args.agreement:
            got = target.generate(prompts, SamplingParams(max_tokens=args.new_tokens, temperature=0.0))
            same, share = agreement(reference, [truncate_at_eos(a, eos) for a in got])
            agree = f"{same}/{len(prompts)} | {share:.0%}"
        quick = "-"
        if args.quickstart:
            turns = quickstart(target)
            quick = f"{sum(r for _, _, r in turns)}/{len(turns)}" + "".join(
                f" ✗ {q!r}: {a[:50]!r}" for q, a, r in turns if not r)
        print(f"| {spec} | {value:.4f} | {agree} | {quick} |", flush=True)
        print(f"({spec}: {time.perf_counter() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
