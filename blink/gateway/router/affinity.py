"""Prefix affinity: send a request to the replica that most likely holds its prefix in KV cache.

Like SGLang's cache-aware router: an approximate prefix index over request text per tier —
here chained hashes of fixed-size text blocks mapped to the replica that last served them. The
best-matching replica wins when it matches at least ``min_match`` of the prompt and load is
balanced; when the busiest replica has both ``balance_abs`` more requests in flight than the
idlest and more than ``balance_rel`` x as many, the caller falls back to load balancing.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

# 64 characters ~ 16 tokens: one KV block of most engines.
_BLOCK_CHARS = 64


@dataclass(slots=True)
class AffinityConfig:
    enabled: bool = True
    # SGLang's defaults: cache_threshold 0.5, balance_abs_threshold 32, balance_rel_threshold 1.0001.
    min_match: float = 0.5
    balance_abs: int = 32
    balance_rel: float = 1.0001
    # Blocks remembered per tier (LRU): ~64k blocks x 64 chars covers 4M characters of prefixes.
    max_blocks: int = 65_536


def block_hashes(text: str) -> list[bytes]:
    """Chained hashes of the text's full 64-character blocks (a block's hash covers all before it)."""
    hashes: list[bytes] = []
    parent = b""
    for start in range(0, len(text) - _BLOCK_CHARS + 1, _BLOCK_CHARS):
        parent = hashlib.blake2b(parent + text[start : start + _BLOCK_CHARS].encode(), digest_size=8).digest()
        hashes.append(parent)
    return hashes


class PrefixIndex:
    """Block hash -> replica name, LRU-bounded: one per tier."""

    def __init__(self, config: AffinityConfig | None = None) -> None:
        self.config = config or AffinityConfig()
        self._owner: OrderedDict[bytes, str] = OrderedDict()

    def best(self, hashes: Sequence[bytes], names: Sequence[str]) -> tuple[str | None, float]:
        """The replica among ``names`` holding the longest matched prefix, and its match ratio."""
        if not hashes:
            return None, 0.0
        allowed = set(names)
        best_name, best_len = None, 0
        # Walk from the longest prefix down: the first hash owned by an allowed replica wins.
        for i in range(len(hashes) - 1, -1, -1):
            owner = self._owner.get(hashes[i])
            if owner is not None and owner in allowed:
                best_name, best_len = owner, i + 1
                break
        return best_name, best_len / len(hashes)

    def insert(self, hashes: Sequence[bytes], name: str) -> None:
        owner = self._owner
        for h in hashes:
            owner[h] = name
            owner.move_to_end(h)
        while len(owner) > self.config.max_blocks:
            owner.popitem(last=False)

    def imbalanced(self, loads: Sequence[int]) -> bool:
        lo, hi = min(loads), max(loads)
        return hi - lo > self.config.balance_abs and hi > lo * self.config.balance_rel
