"""The one interface every cache backend implements (memory+SQLite, PostgreSQL+pgvector).

``ns`` is a namespace: tenant, model, system prompt, sampling parameters and conversation
context hashed together, so an entry can only ever be found by a request that shares all of
them. ``key`` is the exact hash of the whole normalised request; ``vec`` its unit-norm
embedding (None when only the exact cache is on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blink.gateway.cache.entry import CachedResponse


@dataclass(slots=True)
class CacheStats:
    entries: int
    namespaces: int
    detail: str = ""


class CacheStore(Protocol):
    async def start(self) -> None:
        """Open files / connections and load what is persisted; idempotent."""
        ...

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None: ...

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        """Up to ``k`` live entries of ``ns`` by cosine similarity, best first."""
        ...

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        """Store ``resp``; returns once it is durable (survives a crash of this process)."""
        ...

    async def stats(self) -> CacheStats: ...

    async def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        ...

    async def aclose(self) -> None: ...
