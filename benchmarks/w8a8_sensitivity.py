"""Where W8A8 loses perplexity on the real SmolLM2: per layer kind, smoothed or not.

    python benchmarks/w8a8_sensitivity.py [--tokens 1024] [--configs "s,lm_head=o" "u" ...]

Two ``int8-w8a8`` engines on the GGUF ``blink serve`` falls back to offline: one calibrated at
start (SmoothQuant, blink/engine/layers/smoothing.py), one not (an empty calibration text). Each
config then sets every linear of the first engine's W8A8 path to ``s`` (smoothed), ``u``
(unsmoothed) or ``o`` (off: the int8 weight-only path), a default letter followed by
``name-part=letter`` overrides (``down_proj``, ``qkv_proj``, ``o_proj``, ``gate_up_proj``,
``lm_head``, ``layers.7.`` ...), and scores the prefill-path perplexity (128-token chunks,
512-token windows) of benchmarks/data/newton_opticks_book1.txt, as real_model_quality.py does.
Perplexity does not depend on machine load.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blink.demo.default_model import fetch_smollm2  # noqa: E402
from blink.engine import llm_engine  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.layers.linear_int8 import Int8Linear  # noqa: E402
from blink.engine.perplexity import perplexity  # noqa: E402

TEXT = ROOT / "benchmarks" / "data" / "newton_opticks_book1.txt"
DEFAULT_CONFIGS = ["u", "s", "u,lm_head=o", "s,lm_head=o", "o",
                   *(f"s,lm_head=o,{kind}=o" for kind in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--configs", nargs="*", default=DEFAULT_CONFIGS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = fetch_smollm2()

    def engine() -> llm_engine.LLMEngine:
        config = EngineConfig(model=str(path), dtype="bfloat16", quantization="int8-w8a8", threads=args.threads,
                              max_model_len=2048, kv_cache_memory_bytes=256 << 20, enable_prefix_caching=False)
        return llm_engine.LLMEngine(config, path)

    smoothed = engine()
    with mock.patch.object(llm_engine, "calibration_text", lambda: ""):
        plain = engine()
    assert smoothed.runner.smoothed_w8a8 and not plain.runner.smoothed_w8a8

    def w8a8_state(e: llm_engine.LLMEngine) -> dict[str, tuple[object, object, object]]:
        return {n: (m.w8a8_weight, m.w_scales, m.x_col_scale)
                for n, m in e.runner.model.named_modules() if isinstance(m, Int8Linear)}

    states = {"s": w8a8_state(smoothed), "u": w8a8_state(plain)}
    layers = {n: m for n, m in smoothed.runner.model.named_modules() if isinstance(m, Int8Linear)}
    ids = smoothed.tokenizer.encode(TEXT.read_text(), add_special_tokens=False)[: args.tokens]
    print(f"CPU: {read_cpu_features().describe()}; {len(ids)} tokens of {TEXT.name}\n")
    print("| config | ppl, prefill path |\n|---|---|")
    for spec in args.configs:
        default, *overrides = spec.split(",")
        rules = [tuple(o.split("=")) for o in overrides]
        for name, layer in layers.items():
            letter = next((v for k, v in rules if k in name), default)
            # The LM head has no W8A8 path in either engine: "s"/"u" leave it weight-only.
            layer.w8a8_weight, layer.w_scales, layer.x_col_scale = (  # type: ignore[assignment]
                (None, None, None) if letter == "o" else states[letter][name])
        t0 = time.perf_counter()
        value = perplexity(smoothed.runner, ids, 512, 128).value
        print(f"| {spec} | {value:.4f} |", flush=True)
        print(f"({spec}: {time.perf_counter() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
