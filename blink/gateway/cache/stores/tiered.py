"""Exact lookups from one store, vector search from another (Redis + PostgreSQL/pgvector).

The exact path is a key lookup that Redis answers in well under a millisecond; the semantic
path needs pgvector's HNSW. Every entry goes to the exact store; entries with an embedding
also go to the vector store. Counts and clears follow the exact store, which holds them all.
"""

from __future__ import annotations

import asyncio

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats, CacheStore


class TieredCacheStore:
    def __init__(self, exact: CacheStore, vectors: CacheStore) -> None:
        self.exact = exact
        self.vectors = vectors

    async def start(self) -> None:
        await asyncio.gather(self.exact.start(), self.vectors.start())

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        return await self.exact.get_exact(ns, key)

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        return await self.vectors.nearest(ns, vec, k)

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        if vec is None:
            await self.exact.put(ns, key, vec, resp, ttl)
            return
        await asyncio.gather(self.exact.put(ns, key, vec, resp, ttl), self.vectors.put(ns, key, vec, resp, ttl))

    async def stats(self) -> CacheStats:
        s = await self.exact.stats()
        v = await self.vectors.stats()
        return CacheStats(s.entries, s.namespaces, f"{s.detail}; vectors: {v.detail}")

    async def clear(self) -> int:
        n, _ = await asyncio.gather(self.exact.clear(), self.vectors.clear())
        return int(n)

    async def aclose(self) -> None:
        await asyncio.gather(self.exact.aclose(), self.vectors.aclose(), return_exceptions=True)
