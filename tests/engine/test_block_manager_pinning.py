"""Warm prefixes: hot prefix blocks are pinned within a budget and outlive churn that evicts
everything else; the pool still gives them up as a last resort, and nothing leaks."""

from __future__ import annotations

import pytest
from test_block_manager import BS, admit, assert_clean, make_seq

from blink.engine.block_manager import PIN_AFTER_HITS, BlockManager

SYSTEM = list(range(100, 100 + 2 * BS))  # a two-block "system prompt"


def _use(bm: BlockManager, tokens: list[int], rid: str) -> int:
    """Admit, compute, free one request; returns the prefix tokens it found cached."""
    seq = make_seq(tokens, rid)
    _, cached = bm.get_computed_blocks(seq)
    assert admit(bm, seq)
    bm.free(seq)
    return cached


def _churn(bm: BlockManager, n: int, start: int) -> None:
    for i in range(n):  # one-off prompts, each filling the pool's worth of new blocks
        _use(bm, [start + i * 1000 + t for t in range(3 * BS + 1)], f"churn{i}")


def test_a_hot_prefix_survives_churn_that_evicts_a_cold_one() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True, pinned_blocks=2)
    cold = list(range(500, 500 + 2 * BS))
    _use(bm, [*cold, 1], "cold")
    for i in range(PIN_AFTER_HITS + 1):
        _use(bm, [*SYSTEM, 10 + i], f"hot{i}")
    assert bm.num_pinned == 2
    _churn(bm, 4, 10_000)
    assert _use(bm, [*SYSTEM, 99], "after") == 2 * BS  # the whole system prompt, no prefill
    assert _use(bm, [*cold, 2], "cold-again") == 0  # evicted by the churn
    assert_clean(bm)


def test_without_a_budget_the_churn_evicts_the_hot_prefix_too() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    for i in range(PIN_AFTER_HITS + 1):
        _use(bm, [*SYSTEM, 10 + i], f"hot{i}")
    assert bm.num_pinned == 0
    _churn(bm, 4, 10_000)
    assert _use(bm, [*SYSTEM, 99], "after") == 0


def test_the_budget_bounds_pinned_blocks() -> None:
    bm = BlockManager(16, BS, enable_prefix_caching=True, pinned_blocks=1)
    other = list(range(700, 700 + BS))
    for i in range(PIN_AFTER_HITS + 1):
        _use(bm, [*SYSTEM, 10 + i], f"hot{i}")
        _use(bm, [*other, 10 + i], f"other{i}")
    assert bm.num_pinned == 1


def test_pinned_blocks_are_given_up_when_a_request_needs_the_whole_pool() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True, pinned_blocks=2)
    for i in range(PIN_AFTER_HITS + 1):
        _use(bm, [*SYSTEM, 10 + i], f"hot{i}")
    big = make_seq(list(range(20_000, 20_000 + 8 * BS)), "big")  # every block of the pool
    assert admit(bm, big)
    assert bm.num_pinned == 0
    bm.free(big)
    assert_clean(bm)
    assert _use(bm, [*SYSTEM, 99], "after") == 0


def test_reset_unpins_everything() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True, pinned_blocks=2)
    for i in range(PIN_AFTER_HITS + 1):
        _use(bm, [*SYSTEM, 10 + i], f"hot{i}")
    bm.reset_prefix_cache()
    assert bm.num_pinned == 0 and bm.num_cached_blocks == 0
    assert_clean(bm)


@pytest.mark.parametrize("pinned", [-1, 8])
def test_a_budget_outside_the_pool_is_refused(pinned: int) -> None:
    with pytest.raises(ValueError, match="pinned_blocks"):
        BlockManager(8, BS, enable_prefix_caching=True, pinned_blocks=pinned)
