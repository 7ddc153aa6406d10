"""A tiny Llama briefly trained on real text, for tests that need a model's confidence.

Random tiny models have near-tied top logits, so any rounding (bf16, int8) flips their argmax
often and a quality guard measured on them says nothing. A few hundred next-token steps on the
tokenizer's own corpus (Python standard-library sources) give peaked logits on held-out text of
the same kind, like a real checkpoint's on real text.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from blink.demo.tiny import _stdlib_corpus

# Sequence length and batch of the training windows: 8 x 128 tokens per step.
_SEQ, _BATCH = 128, 8
# Held-out text comes from the end of the token stream; training never sees it.
_HOLDOUT_TOKENS = 4096


def corpus_ids(tokenizer_dir: Path) -> list[int]:
    """The whole corpus as token ids (the tokenizer was trained on the same text)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    return [i for text in _stdlib_corpus() for i in tok.encode(text).ids]


def heldout_windows(ids: list[int], count: int, length: int) -> list[list[int]]:
    """``count`` consecutive windows of ``length`` tokens from the held-out tail."""
    tail = ids[-_HOLDOUT_TOKENS:]
    if count * length > len(tail):
        raise ValueError(f"{count}x{length} tokens do not fit in the {len(tail)}-token hold-out")
    return [tail[i * length : (i + 1) * length] for i in range(count)]


def train_checkpoint(src: Path, out: Path, ids: list[int], steps: int, seed: int = 0) -> Path:
    """Copy the checkpoint at ``src`` to ``out`` after ``steps`` AdamW steps on ``ids``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    # Fresh standard init (std 0.02), not the builder's std-0.3 perturbation, which trains slowly.
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.float32)
    model.train()
    train = torch.tensor(ids[:-_HOLDOUT_TOKENS])
    # lr 3e-3 with a linear decay: the tiny model's loss falls fastest there without diverging.
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.05, total_iters=steps)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, train.numel() - _SEQ - 1, (_BATCH,), generator=gen)
        batch = torch.stack([train[s : s + _SEQ] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    model.eval().save_pretrained(out)
    return out
