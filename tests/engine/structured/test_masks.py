"""Bitmask layout and application, and the fill thread."""

from __future__ import annotations

from pathlib import Path

import torch

from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.structured.masks import GrammarMasker, apply_bitmask, new_bitmask
from blink.engine.structured.matcher import GrammarState
from blink.engine.tokenizer import Tokenizer


def test_apply_masks_only_the_listed_rows() -> None:
    bitmask = new_bitmask(3, 70)
    bitmask[1] = 0
    bitmask[1, 2] = 1 << 3  # token 67 only
    logits = torch.zeros(3, 70)
    apply_bitmask(logits, bitmask, [1])
    assert torch.isfinite(logits[0]).all() and torch.isfinite(logits[2]).all()
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [67]


def test_fill_runs_on_the_worker_and_apply_waits_for_it(tiny_tokenizer_dir: Path, engine: str) -> None:
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    gc = GrammarCompiler(tok.hf, tok.vocab_size, sorted(tok.eos_token_ids), engine=engine)
    masker = GrammarMasker(tok.vocab_size)
    try:
        state = GrammarState(gc.get("choice", '["yes"]').result())
        mask = masker.new_mask(2)
        masker.start(mask, [(1, state)])
        logits = torch.zeros(2, tok.vocab_size)
        mask.apply(logits)
        allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
        assert allowed and all(tok.decode([t]) and "yes".startswith(tok.decode([t])) for t in allowed)
        assert torch.isfinite(logits[0]).all()
    finally:
        masker.close()
        gc.close()


def test_a_failing_fill_forbids_its_row_only(tiny_tokenizer_dir: Path, engine: str) -> None:
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    gc = GrammarCompiler(tok.hf, tok.vocab_size, sorted(tok.eos_token_ids), engine=engine)
    masker = GrammarMasker(tok.vocab_size)
    try:
        state = GrammarState(gc.get("regex", "a").result())
        a = tok.encode("a", add_special_tokens=False)[0]
        assert state.accept(a) and state.accept(next(iter(tok.eos_token_ids)))  # terminated: fill raises
        mask = masker.new_mask(1)
        masker.start(mask, [(0, state)])
        logits = torch.zeros(1, tok.vocab_size)
        mask.apply(logits)
        assert not torch.isfinite(logits[0]).any()
    finally:
        masker.close()
        gc.close()
