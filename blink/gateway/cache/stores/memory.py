"""In-process cache: LRU over entries, TTL, one vector index per namespace.

Synchronous at its core so the SQLite store can wrap it and keep a single source of truth
for what is live; the async methods satisfy ``CacheStore`` for purely in-memory use.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats
from blink.gateway.cache.vector_index import DEFAULT_HNSW_THRESHOLD, VectorIndex


@dataclass(slots=True)
class _Entry:
    item_id: int
    ns: str
    key: bytes
    resp: CachedResponse
    expires_at: float
    has_vec: bool


class MemoryCacheStore:
    def __init__(self, max_entries: int = 100_000, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD) -> None:
        self.max_entries = max_entries
        self._hnsw_threshold = hnsw_threshold
        self._lru: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()
        self._by_id: dict[int, _Entry] = {}
        self._indexes: dict[str, VectorIndex] = {}
        self._next_id = 0

    # -- synchronous core ---------------------------------------------------------------------

    def get_exact_sync(self, ns: str, key: bytes, now: float | None = None) -> CachedResponse | None:
        entry = self._lru.get((ns, key))
        if entry is None:
            return None
        if entry.expires_at <= (now or time.time()):
            self._drop(entry)
            return None
        self._lru.move_to_end((ns, key))
        return entry.resp

    def nearest_sync(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        index = self._indexes.get(ns)
        if index is None:
            return []
        now = time.time()
        out: list[tuple[float, CachedResponse]] = []
        for score, item_id in index.search(vec, k):
            entry = self._by_id.get(item_id)
            if entry is None:
                continue
            if entry.expires_at <= now:
                self._drop(entry)
                continue
            self._lru.move_to_end((entry.ns, entry.key))
            out.append((score, entry.resp))
        return out

    def put_sync(
        self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, expires_at: float
    ) -> list[tuple[str, bytes]]:
        """Insert (replacing the same key); returns the (ns, key) pairs evicted to make room."""
        old = self._lru.get((ns, key))
        if old is not None:
            self._drop(old)
        entry = _Entry(self._next_id, ns, key, resp, expires_at, vec is not None)
        self._next_id += 1
        self._lru[(ns, key)] = entry
        self._by_id[entry.item_id] = entry
        if vec is not None:
            index = self._indexes.get(ns)
            if index is None:
                index = self._indexes[ns] = VectorIndex(len(vec), self._hnsw_threshold)
            index.add(entry.item_id, np.asarray(vec, dtype=np.float32))
        evicted: list[tuple[str, bytes]] = []
        while len(self._lru) > self.max_entries:
            (ens, ekey), victim = next(iter(self._lru.items()))
            self._drop(victim)
            evicted.append((ens, ekey))
        return evicted

    def build_indexes(self) -> None:
        """Build every large namespace's graph now (at load, so the first request never waits),
        on every core this process may use: nothing is being served yet."""
        threads = len(os.sched_getaffinity(0))
        for index in self._indexes.values():
            index.build_now(threads)

    def clear_sync(self) -> int:
        n = len(self._lru)
        self._lru.clear()
        self._by_id.clear()
        self._indexes.clear()
        return n

    def stats_sync(self) -> CacheStats:
        return CacheStats(entries=len(self._lru), namespaces=len({ns for ns, _ in self._lru}))

    def _drop(self, entry: _Entry) -> None:
        self._lru.pop((entry.ns, entry.key), None)
        self._by_id.pop(entry.item_id, None)
        if entry.has_vec:
            index = self._indexes.get(entry.ns)
            if index is not None:
                index.remove(entry.item_id)
                if not len(index):
                    del self._indexes[entry.ns]

    # -- CacheStore ---------------------------------------------------------------------------

    async def start(self) -> None:
        return None

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        return self.get_exact_sync(ns, key)

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        return self.nearest_sync(ns, vec, k)

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        self.put_sync(ns, key, vec, resp, time.time() + ttl)

    async def stats(self) -> CacheStats:
        return self.stats_sync()

    async def clear(self) -> int:
        return self.clear_sync()

    async def aclose(self) -> None:
        return None
