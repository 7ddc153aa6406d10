"""Paged KV-cache bookkeeping: block allocation, reference counts and automatic prefix caching.

Only ids and counters live here; the tensors belong to the model runner. A full block is named by
a chained content hash (parent digest + its token ids), so any request sharing a prefix reuses the
KV already computed for it. A salted sequence (``SamplingParams.cache_salt``: the gateway salts by
tenant) starts its chain from the salt's digest, so only sequences with the same salt share blocks. A block whose last reference drops keeps its hash and stays reusable
until the space is needed, then the least recently freed one is evicted first.

Warm prefixes: up to ``pinned_blocks`` cached blocks that prefix hits reused at least
``PIN_AFTER_HITS`` times (system prompts, few-shot blocks) are pinned. Unreferenced, a pinned block
waits in its own pool that is evicted only when nothing else is left, so a burst of one-off
prompts cannot push a hot prefix out and the first request after it does not pay its prefill.

Blocks are registered in the cache only once their KV has been computed (``cache_full_blocks``
after the step, or ``allocate_slots`` for already-computed positions), never when merely
allocated: a request can therefore never hit a block whose KV is still unwritten.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence as Seq

from blink.engine.sequence import Sequence


def hash_block_tokens(parent: bytes | None, token_ids: Seq[int]) -> bytes:
    """SHA-256 over the parent's digest and the block's token ids (int64 little-endian).

    256 bits make an accidental collision astronomically unlikely; lookups still compare the
    stored (parent, tokens) so even a forced collision can never serve the wrong KV.
    """
    h = hashlib.sha256(parent or b"")
    h.update(array("q", token_ids).tobytes())
    return h.digest()


# Prefix hits that make a cached block worth pinning: one reuse can be chance, two is a pattern.
PIN_AFTER_HITS = 2


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent_hash", "token_ids", "hits", "pinned")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        # Prefix-cache reuses since the block was registered; pinned: a warm prefix block.
        self.hits = 0
        self.pinned = False
        # Set while the block is registered in the prefix cache.
        self.hash: bytes | None = None
        self.parent_hash: bytes | None = None
        self.token_ids: tuple[int, ...] | None = None

    def clear_hash(self) -> None:
        self.hash = self.parent_hash = self.token_ids = None
        self.hits = 0
        self.pinned = False


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool, pinned_blocks: int = 0) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        if not 0 <= pinned_blocks < num_blocks:
            raise ValueError(f"need 0 <= pinned_blocks < num_blocks ({num_blocks}), got {pinned_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Unreferenced blocks without a hash: handed out before any cached block is evicted.
        self._free: deque[int] = deque(range(num_blocks))
        # Unreferenced blocks with a hash, least recently freed first (eviction order).
        self._evictable: OrderedDict[int, None] = OrderedDict()
        # Unreferenced pinned blocks, least recently freed first: evicted only as a last resort.
        self._pinned_idle: OrderedDict[int, None] = OrderedDict()
        self.pinned_budget = pinned_blocks
        self.num_pinned = 0
        self._cached: dict[bytes, int] = {}
        # Counted in tokens at each admission: hits / queries is the share of prompt tokens reused.
        self.prefix_cache_hits = 0
        self.prefix_cache_queries = 0

    # ----------------------------------------------------------------- accounting
    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable right now (plain free + evictable cached)."""
        return len(self._free) + len(self._evictable) + len(self._pinned_idle)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ----------------------------------------------------------------- prefix cache lookup
    def get_computed_blocks(self, seq: Sequence) -> tuple[list[int], int]:
        """Longest cached run of full blocks at the start of ``seq``; takes no references.

        Stops one token short of the whole sequence so the forward still yields a logit. A
        sequence that needs every prompt position's logits gets no cached blocks.
        """
        if not self.enable_prefix_caching or seq.prompt_logits_pending:
            return [], 0
        max_blocks = (seq.num_tokens - 1) // self.block_size
        self._extend_hashes(seq, max_blocks)
        found: list[int] = []
        parent: bytes | None = seq.cache_root
        for i in range(max_blocks):
            h = seq.block_hashes[i]
            bid = self._cached.get(h)
            if bid is None or not self._matches(self.blocks[bid], parent, seq, i):
                break
            found.append(bid)
            parent = h
        return found, len(found) * self.block_size

    def _matches(self, block: Block, parent: bytes | None, seq: Sequence, index: int) -> bool:
        start = index * self.block_size
        return block.parent_hash == parent and block.token_ids == tuple(
            seq.token_ids[start : start + self.block_size]
        )

    def _extend_hashes(self, seq: Sequence, num_blocks: int) -> None:
        bs = self.block_size
        hashes = seq.block_hashes
        for i in range(len(hashes), num_blocks):
            parent = hashes[i - 1] if i else seq.cache_root
            hashes.append(hash_block_tokens(parent, seq.token_ids[i * bs : (i + 1) * bs]))

    # ----------------------------------------------------------------- allocation
    def allocate_slots(
        self, seq: Sequence, num_new_tokens: int, computed_blocks: list[int] | None = None
    ) -> bool:
        """Grow ``seq.block_table`` to cover computed + ``num_new_tokens`` positions.

        With ``computed_blocks`` (admission only) their references are taken first and the
        sequence starts after them. All-or-nothing: returns False and changes nothing if the pool
        cannot supply the blocks even after evicting every unreferenced cached block.
        """
        if not computed_blocks and seq.num_computed_tokens + num_new_tokens <= len(seq.block_table) * self.block_size:
            # The table already covers them (most decode steps): nothing to take from the pool.
            self.cache_full_blocks(seq)
            return True
        computed = computed_blocks or []
        if computed and seq.block_table:
            raise ValueError("computed_blocks can only be given when the sequence holds no blocks")
        num_computed = len(computed) * self.block_size if computed else seq.num_computed_tokens
        needed = self.blocks_needed(num_computed + num_new_tokens) - len(seq.block_table) - len(computed)
        # Reviving an evictable hit takes it out of the free pool too.
        revived = sum(1 for b in computed if self.blocks[b].ref_count == 0)
        if max(needed, 0) + revived > self.num_free_blocks:
            return False

        first_admission = not seq.block_table and seq.num_computed_tokens == 0
        for bid in computed:
            self._take_ref(bid)
            self._count_hit(self.blocks[bid])
        seq.block_table.extend(computed)
        if first_admission:
            seq.num_computed_tokens = seq.num_cached_tokens = num_computed
            seq.num_hashed_blocks = len(computed)
            if self.enable_prefix_caching:
                self.prefix_cache_queries += seq.num_tokens
                self.prefix_cache_hits += num_computed
        for _ in range(needed):
            seq.block_table.append(self._pop_free_block())
        self.cache_full_blocks(seq)
        return True

    def _take_ref(self, bid: int) -> None:
        block = self.blocks[bid]
        if block.ref_count == 0:
            (self._pinned_idle if block.pinned else self._evictable).pop(bid)
        block.ref_count += 1

    def _count_hit(self, block: Block) -> None:
        block.hits += 1
        if not block.pinned and block.hits >= PIN_AFTER_HITS and self.num_pinned < self.pinned_budget:
            block.pinned = True
            self.num_pinned += 1

    def _pop_free_block(self) -> int:
        if self._free:
            bid = self._free.popleft()
        else:
            pool = self._evictable if self._evictable else self._pinned_idle
            bid, _ = pool.popitem(last=False)
            block = self.blocks[bid]
            if block.pinned:
                self.num_pinned -= 1
            if block.hash is not None and self._cached.get(block.hash) == bid:
                del self._cached[block.hash]
            block.clear_hash()
        self.blocks[bid].ref_count = 1
        return bid

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the blocks of ``seq`` that are full of computed KV in the prefix cache.

        A block whose hash is already registered (a duplicate computed concurrently, or a
        collision) is left unregistered: it is freed normally and the first copy stays served.
        """
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        if num_full <= seq.num_hashed_blocks:
            return
        self._extend_hashes(seq, num_full)
        bs = self.block_size
        for i in range(seq.num_hashed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            h = seq.block_hashes[i]
            if block.hash is None and h not in self._cached:
                block.hash = h
                block.parent_hash = seq.block_hashes[i - 1] if i else seq.cache_root
                block.token_ids = tuple(seq.token_ids[i * bs : (i + 1) * bs])
                self._cached[h] = block.block_id
        seq.num_hashed_blocks = num_full

    # ----------------------------------------------------------------- release
    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references; cached blocks stay reusable until evicted.

        The tail is released first so that, among one request's blocks, the least shareable
        (last) ones are evicted first.
        """
        for bid in reversed(seq.block_table):
            self._release(bid)
        seq.block_table.clear()
        seq.num_hashed_blocks = 0

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Release trailing blocks not needed to hold ``num_tokens`` positions (speculation
        reserved slots for proposals that were rejected)."""
        keep = self.blocks_needed(num_tokens)
        while len(seq.block_table) > max(keep, seq.num_hashed_blocks):
            self._release(seq.block_table.pop())

    def _release(self, bid: int) -> None:
        """Drop one reference; an unreferenced block becomes evictable (hashed) or free."""
        block = self.blocks[bid]
        block.ref_count -= 1
        if block.ref_count < 0:
            raise RuntimeError(f"block {bid} freed more times than referenced")
        if block.ref_count == 0:
            if block.pinned:
                self._pinned_idle[bid] = None
            elif block.hash is not None:
                self._evictable[bid] = None
            else:
                self._free.append(bid)

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (e.g. after weights change); in-use blocks stay allocated.

        Hit/query counters are cumulative (they feed monotonic metrics) and are kept.
        """
        for bid in (*self._evictable, *self._pinned_idle):
            self.blocks[bid].clear_hash()
            self._free.append(bid)
        self._evictable.clear()
        self._pinned_idle.clear()
        for block in self.blocks:
            block.clear_hash()
        self._cached.clear()
        self.num_pinned = 0
