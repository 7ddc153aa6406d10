"""A request's grammar position: accept, terminate, and the speculative draft walk (both engines)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from blink.engine.structured.compiler import GrammarCompiler
from blink.engine.structured.masks import new_bitmask
from blink.engine.structured.matcher import GrammarState
from blink.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def setup(tiny_tokenizer_dir: Path, engine: str) -> Iterator[tuple[Tokenizer, GrammarCompiler]]:
    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    gc = GrammarCompiler(tok.hf, tok.vocab_size, sorted(tok.eos_token_ids), engine=engine)
    yield tok, gc
    gc.close()


def _allowed(bitmask: object, row: int, token: int) -> bool:
    return bool(int(bitmask[row, token // 32]) >> (token % 32) & 1)  # type: ignore[index]


def test_accept_then_stop_terminates(setup: tuple[Tokenizer, GrammarCompiler]) -> None:
    tok, gc = setup
    state = GrammarState(gc.get("regex", "ab").result())
    eos = next(iter(tok.eos_token_ids))
    bitmask = new_bitmask(1, tok.vocab_size)
    state.fill(bitmask, 0)
    assert not _allowed(bitmask, 0, eos)  # EOS only once the output is complete
    for t in tok.encode("ab", add_special_tokens=False):
        assert state.accept(t)
    state.fill(bitmask, 0)
    assert _allowed(bitmask, 0, eos)
    assert not state.terminated
    assert state.accept(eos) and state.terminated


def test_draft_walk_stops_at_the_first_rejected_draft_and_rolls_back(setup: tuple[Tokenizer, GrammarCompiler]) -> None:
    tok, gc = setup
    state = GrammarState(gc.get("regex", "[a-c]+x").result())
    good = [tok.encode(c, add_special_tokens=False)[0] for c in "abc"]
    bad = tok.encode("z", add_special_tokens=False)[0]
    bitmask = new_bitmask(6, tok.vocab_size)
    kept = state.check_drafts([*good[:2], bad, good[2]], bitmask, 1)
    assert kept == 2
    assert _allowed(bitmask, 1, good[0]) and not _allowed(bitmask, 1, bad)
    assert all(int(w) == -1 for w in bitmask[4])  # rows past the kept drafts untouched
    # Rolled back: the state is where it started, so the first draft is still acceptable.
    assert state.accept(good[1]) and state.accept(good[0])


def test_draft_walk_ends_after_a_stop_token(setup: tuple[Tokenizer, GrammarCompiler]) -> None:
    tok, gc = setup
    state = GrammarState(gc.get("regex", "a").result())
    a = tok.encode("a", add_special_tokens=False)[0]
    eos = next(iter(tok.eos_token_ids))
    assert state.check_drafts([a, eos, a], new_bitmask(4, tok.vocab_size), 0) == 2
    assert not state.terminated
    # Rolled back to the start exactly, also where the grammar was complete before its stop token
    # (llguidance does not record a stop token it takes once nothing else may follow).
    assert state.accept(a)
    bitmask = new_bitmask(1, tok.vocab_size)
    assert state.check_drafts([eos], bitmask, 0) == 1
    state.fill(bitmask, 0)
    assert _allowed(bitmask, 0, eos) and not _allowed(bitmask, 0, a)
    assert state.accept(eos) and state.terminated


def test_a_refused_token_leaves_the_state_unchanged(setup: tuple[Tokenizer, GrammarCompiler]) -> None:
    tok, gc = setup
    state = GrammarState(gc.get("choice", '["yes", "no"]').result())
    assert not state.accept(tok.encode("z", add_special_tokens=False)[0])
    assert all(state.accept(t) for t in tok.encode("no", add_special_tokens=False))
    assert state.accept(next(iter(tok.eos_token_ids))) and state.terminated
    assert not state.accept(tok.encode("y", add_special_tokens=False)[0])  # nothing after the end
