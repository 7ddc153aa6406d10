"""The compiled-grammar cache: one compile per distinct spec, bounded, failures kept as failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(tiny_tokenizer_dir)


def test_same_spec_compiles_once_and_the_cache_is_bounded(tokenizer: Tokenizer) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size + 64, sorted(tokenizer.eos_token_ids), capacity=2)
    try:
        first = gc.get("regex", "a+")
        assert gc.get("regex", "a+") is first
        first.result()
        gc.get("regex", "b+")
        gc.get("regex", "c+")
        assert len(gc) == 2
        assert gc.get("regex", "a+") is not first  # evicted, compiled again
    finally:
        gc.close()


def test_a_failed_compile_is_cached_as_failed(tokenizer: Tokenizer) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids))
    try:
        fut = gc.get("grammar", 'start ::= "a"')
        with pytest.raises(RuntimeError):
            fut.result()
        assert gc.get("grammar", 'start ::= "a"') is fut
    finally:
        gc.close()


def test_json_kinds_forbid_tokens_with_control_characters(tokenizer: Tokenizer) -> None:
    gc = GrammarCompiler(tokenizer.hf, tokenizer.vocab_size, sorted(tokenizer.eos_token_ids))
    try:
        assert gc.extra_mask("regex") is None
        row = gc.extra_mask("json_schema")
        assert row is not None and gc.extra_mask("json_object") is row
        allowed = [bool(int(row[t // 32]) >> (t % 32) & 1) for t in range(tokenizer.vocab_size)]
        for t in range(tokenizer.vocab_size):
            text = tokenizer.decode([t], skip_special_tokens=False)
            if any(ord(c) < 0x20 for c in text):
                assert not allowed[t], repr(text)
        assert allowed[tokenizer.encode('{"', add_special_tokens=False)[0]]
        assert all(allowed[t] for t in tokenizer.eos_token_ids)
    finally:
        gc.close()
