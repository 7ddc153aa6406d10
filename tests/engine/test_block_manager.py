"""BlockManager: allocation, ref counts, prefix caching, LRU eviction, collision safety."""

from __future__ import annotations

import pytest

from blink.engine import block_manager as bm_mod
from blink.engine.block_manager import BlockManager
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence

BS = 4


def make_seq(tokens: list[int], rid: str = "r", salt: str | None = None) -> Sequence:
    return Sequence(rid, tokens, SamplingParams(cache_salt=salt), frozenset({0}))


def admit(bm: BlockManager, seq: Sequence) -> bool:
    """Admission as the scheduler does it, then mark the whole sequence computed."""
    blocks, _ = bm.get_computed_blocks(seq)
    ok = bm.allocate_slots(seq, seq.num_tokens - len(blocks) * BS, blocks)
    if ok:
        seq.num_computed_tokens = seq.num_tokens
        bm.cache_full_blocks(seq)
    return ok


def assert_clean(bm: BlockManager) -> None:
    assert bm.num_free_blocks == bm.num_blocks
    assert all(b.ref_count == 0 for b in bm.blocks)


def test_allocate_covers_positions_and_free_returns_everything() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=False)
    seq = make_seq(list(range(1, 11)))  # 10 tokens -> 3 blocks
    assert bm.allocate_slots(seq, 10)
    assert len(seq.block_table) == 3
    assert len(set(seq.block_table)) == 3
    assert bm.num_free_blocks == 5
    seq.num_computed_tokens = 10
    seq.append_token(11)
    assert bm.allocate_slots(seq, 1)  # position 10 still in block 2
    assert len(seq.block_table) == 3
    seq.num_computed_tokens = 11
    for t in (12, 13):
        seq.append_token(t)
    assert bm.allocate_slots(seq, 2)  # positions 11, 12 -> a 4th block
    assert len(seq.block_table) == 4
    bm.free(seq)
    assert seq.block_table == []
    assert_clean(bm)
    assert bm.usage == 0.0


def test_allocation_is_all_or_nothing() -> None:
    bm = BlockManager(2, BS, enable_prefix_caching=True)
    seq = make_seq(list(range(1, 13)))  # needs 3 blocks
    assert not bm.allocate_slots(seq, 12)
    assert seq.block_table == [] and seq.num_computed_tokens == 0
    assert_clean(bm)


def test_no_hits_when_prefix_caching_disabled() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=False)
    a = make_seq(list(range(1, 10)), "a")
    admit(bm, a)
    b = make_seq(list(range(1, 10)), "b")
    assert bm.get_computed_blocks(b) == ([], 0)
    bm.free(a)
    assert bm.num_cached_blocks == 0
    assert_clean(bm)


def test_prefix_sharing_between_live_sequences() -> None:
    bm = BlockManager(16, BS, enable_prefix_caching=True)
    prefix = list(range(100, 108))  # two full blocks
    a = make_seq(prefix + [1, 2, 3], "a")
    assert admit(bm, a)
    b = make_seq(prefix + [7, 8], "b")
    blocks, n = bm.get_computed_blocks(b)
    assert blocks == a.block_table[:2] and n == 8
    assert bm.allocate_slots(b, b.num_tokens - n, blocks)
    assert b.num_computed_tokens == 8 and b.num_cached_tokens == 8
    assert b.block_table[:2] == a.block_table[:2]
    assert b.block_table[2] != a.block_table[2]
    assert [bm.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    assert bm.num_free_blocks == 16 - 4
    bm.free(a)
    assert [bm.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    bm.free(b)
    assert_clean(bm)
    assert bm.prefix_cache_hits == 8
    assert bm.prefix_cache_queries == a.num_tokens + b.num_tokens


def test_only_sequences_with_the_same_salt_share_blocks() -> None:
    """A salt (the gateway's tenant) scopes the prefix cache: another salt, or none, gets no hit,
    at the first block already, while sequences with the same salt share as unsalted ones do."""
    bm = BlockManager(32, BS, enable_prefix_caching=True)
    prompt = list(range(100, 112))  # three full blocks
    a = make_seq(prompt + [1], "a", salt="tenant-a")
    assert admit(bm, a)
    for rid, salt in (("b", "tenant-b"), ("none", None), ("a-ish", "tenant-a\0")):
        assert bm.get_computed_blocks(make_seq(prompt + [2], rid, salt)) == ([], 0), rid
    blocks, n = bm.get_computed_blocks(make_seq(prompt + [3], "a2", salt="tenant-a"))
    assert blocks == a.block_table[:3] and n == 12
    plain = make_seq(prompt + [4], "p")
    assert admit(bm, plain)  # unsalted: a chain of its own beside the salted one
    assert bm.get_computed_blocks(make_seq(prompt + [5], "p2"))[1] == 12
    assert bm.get_computed_blocks(make_seq(prompt + [6], "b2", salt="tenant-b"))[1] == 0


def test_whole_sequence_never_fully_cached() -> None:
    """An exact repeat of a block-aligned prompt must still compute its last token."""
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 9)), "a")
    admit(bm, a)
    bm.free(a)
    b = make_seq(list(range(1, 9)), "b")
    blocks, n = bm.get_computed_blocks(b)
    assert n == 4 and len(blocks) == 1


def test_freed_cached_block_is_reused_after_free() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 10)), "a")
    admit(bm, a)
    first_two = a.block_table[:2]
    bm.free(a)
    assert bm.num_free_blocks == 8  # cached blocks count as free
    assert bm.num_cached_blocks == 2
    b = make_seq(list(range(1, 10)) + [42], "b")
    blocks, n = bm.get_computed_blocks(b)
    assert blocks == first_two and n == 8
    assert bm.allocate_slots(b, b.num_tokens - n, blocks)
    assert bm.num_free_blocks == 8 - 3
    bm.free(b)
    assert_clean(bm)


def test_plain_free_blocks_are_used_before_evicting_cached() -> None:
    bm = BlockManager(4, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 5)) + [9], "a")  # 1 full block cached + 1 partial
    admit(bm, a)
    bm.free(a)
    assert bm.num_cached_blocks == 1
    b = make_seq(list(range(50, 58)) + [1], "b")  # 3 blocks: only the 3 uncached ones fit
    assert admit(bm, b)
    assert bm.num_cached_blocks == 1 + 2  # a's block survived, b's two full blocks added
    bm.free(b)
    assert_clean(bm)


def test_eviction_is_least_recently_freed_first() -> None:
    bm = BlockManager(4, BS, enable_prefix_caching=True)
    seqs = [make_seq([10 * k + j for j in range(BS)] + [1], f"s{k}") for k in range(1, 5)]
    # Each sequence caches exactly one full block; free them in order s1, s2.
    for s in seqs[:2]:
        assert admit(bm, s)
    cached = {s.request_id: s.block_table[0] for s in seqs[:2]}
    bm.free(seqs[0])
    bm.free(seqs[1])
    # Free list now: two plain blocks (the partial tails) + evictable [s1-block, s2-block].
    hog = make_seq(list(range(200, 211)), "hog")  # 11 tokens -> 3 blocks: 2 plain + 1 eviction
    assert bm.allocate_slots(hog, 11)
    assert cached["s1"] in hog.block_table  # least recently freed went first
    assert bm.get_computed_blocks(make_seq(seqs[0].token_ids, "x"))[1] == 0
    assert bm.get_computed_blocks(make_seq(seqs[1].token_ids, "y"))[1] == BS
    bm.free(hog)
    assert_clean(bm)


def test_hit_refreshes_lru_position() -> None:
    bm = BlockManager(3, BS, enable_prefix_caching=True)
    a = make_seq([1, 2, 3, 4], "a")
    b = make_seq([5, 6, 7, 8], "b")
    # Sequences of exactly one block: allocate, compute, cache.
    for s in (a, b):
        assert bm.allocate_slots(s, 4)
        s.num_computed_tokens = 4
        bm.cache_full_blocks(s)
    a_block = a.block_table[0]
    bm.free(a)
    bm.free(b)  # LRU order: a, b
    a2 = make_seq([1, 2, 3, 4, 9], "a2")
    blocks, _ = bm.get_computed_blocks(a2)
    assert blocks == [a_block]
    assert bm.allocate_slots(a2, 1, blocks)
    bm.free(a2)  # a's block now most recently freed: order b, (a2 tail), a
    hog = make_seq(list(range(100, 108)), "hog")
    assert bm.allocate_slots(hog, 8)  # one plain block + evict one: must be b's
    assert bm.get_computed_blocks(make_seq([1, 2, 3, 4, 0], "q"))[1] == 4
    assert bm.get_computed_blocks(make_seq([5, 6, 7, 8, 0], "q"))[1] == 0
    bm.free(hog)
    assert_clean(bm)


def test_forced_hash_collision_never_serves_wrong_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm_mod, "hash_block_tokens", lambda parent, tokens: b"same")
    bm = BlockManager(16, BS, enable_prefix_caching=True)
    a = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9], "a")
    admit(bm, a)
    # Different first block, same hash: miss.
    b = make_seq([9, 9, 9, 9, 5, 6, 7, 8, 9], "b")
    assert bm.get_computed_blocks(b) == ([], 0)
    # Same first block, different second block with the same (constant) hash: only block 0 hits.
    c = make_seq([1, 2, 3, 4, 0, 0, 0, 0, 9], "c")
    blocks, n = bm.get_computed_blocks(c)
    assert blocks == a.block_table[:1] and n == 4
    # Same second block content but a different parent: never served.
    d = make_seq([4, 3, 2, 1, 5, 6, 7, 8, 9], "d")
    assert bm.get_computed_blocks(d) == ([], 0)
    for s in (b, c, d):
        admit(bm, s)
    for s in (a, b, c, d):
        bm.free(s)
    assert_clean(bm)
    # After everything is freed and reallocated, lookups still verify contents.
    e = make_seq([9, 9, 9, 9, 1], "e")
    blocks, n = bm.get_computed_blocks(e)
    for bid in blocks:
        assert bm.blocks[bid].token_ids == (9, 9, 9, 9)


def test_collision_chain_with_real_hash_distinguishes_parents() -> None:
    bm = BlockManager(16, BS, enable_prefix_caching=True)
    a = make_seq([1, 1, 1, 1, 2, 2, 2, 2, 3], "a")
    admit(bm, a)
    b = make_seq([7, 7, 7, 7, 2, 2, 2, 2, 3], "b")  # same 2nd block, other parent
    assert bm.get_computed_blocks(b) == ([], 0)


def test_blocks_registered_only_once_computed() -> None:
    """Allocated-but-uncomputed blocks must not be visible to other requests."""
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 10)), "a")
    assert bm.allocate_slots(a, 9)
    assert bm.get_computed_blocks(make_seq(list(range(1, 10)), "b")) == ([], 0)
    a.num_computed_tokens = 4  # one chunk done
    bm.cache_full_blocks(a)
    assert bm.get_computed_blocks(make_seq(list(range(1, 10)), "b"))[1] == 4
    a.num_computed_tokens = 9
    bm.cache_full_blocks(a)
    assert bm.get_computed_blocks(make_seq(list(range(1, 10)), "b"))[1] == 8
    bm.free(a)
    assert_clean(bm)


def test_duplicate_blocks_computed_concurrently_are_freed_cleanly() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 10)), "a")
    b = make_seq(list(range(1, 10)), "b")
    assert bm.allocate_slots(a, 9) and bm.allocate_slots(b, 9)  # same step, no hits yet
    for s in (a, b):
        s.num_computed_tokens = 9
        bm.cache_full_blocks(s)
    assert bm.num_cached_blocks == 2
    first_copy = a.block_table[:2]
    bm.free(a)
    bm.free(b)
    assert_clean(bm)
    assert bm.num_cached_blocks == 2
    c = make_seq(list(range(1, 10)), "c")
    assert bm.get_computed_blocks(c) == (first_copy, 8)


def test_reset_prefix_cache() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    a = make_seq(list(range(1, 10)), "a")
    admit(bm, a)
    live = make_seq(list(range(20, 30)), "live")
    admit(bm, live)
    bm.free(a)
    bm.reset_prefix_cache()
    assert bm.num_cached_blocks == 0
    assert bm.get_computed_blocks(make_seq(list(range(1, 10)), "x")) == ([], 0)
    bm.free(live)
    assert_clean(bm)
    assert len(bm._free) == bm.num_blocks  # everything back on the plain list


def test_double_free_is_detected() -> None:
    bm = BlockManager(4, BS, enable_prefix_caching=False)
    a = make_seq([1, 2, 3], "a")
    bm.allocate_slots(a, 3)
    table = list(a.block_table)
    bm.free(a)
    a.block_table = table
    with pytest.raises(RuntimeError):
        bm.free(a)


def test_hit_rate() -> None:
    bm = BlockManager(8, BS, enable_prefix_caching=True)
    assert bm.prefix_cache_hit_rate == 0.0
    a = make_seq(list(range(1, 10)), "a")
    admit(bm, a)
    b = make_seq(list(range(1, 10)), "b")
    admit(bm, b)
    assert bm.prefix_cache_hit_rate == pytest.approx(8 / 18)
