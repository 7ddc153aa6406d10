"""A cache store that can never block or fail a request: bounded waits, skipped when down.

Every read is cut off after ``timeout_s`` (a cache that answers later than the backend's own
first token is worth nothing); a write, which runs off the hot path, gets ``write_timeout_s``.
Any error or timeout counts in ``blink_store_errors_total`` and makes the store sit out for
``backoff_s``, so a dead Redis costs one bounded wait per second, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats, CacheStore
from blink.gateway.storage.errors import StoreErrorSink

log = logging.getLogger("blink.cache")
T = TypeVar("T")


class FailSoftStore:
    def __init__(
        self,
        inner: CacheStore,
        name: str,
        errors: StoreErrorSink | None = None,
        *,
        timeout_s: float = 0.05,
        write_timeout_s: float = 1.0,
        backoff_s: float = 1.0,
        start_timeout_s: float = 10.0,
    ) -> None:
        self.inner = inner
        self.name = name
        self.errors = errors
        self.timeout_s = timeout_s
        self.write_timeout_s = write_timeout_s
        self.backoff_s = backoff_s
        self.start_timeout_s = start_timeout_s
        self._down_until = 0.0

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def _guard(self, op: str, call: Awaitable[T], default: T, timeout_s: float) -> T:
        if not self.available:
            if asyncio.iscoroutine(call):
                call.close()  # never started: no "never awaited" warning
            return default
        try:
            return await asyncio.wait_for(call, timeout_s)
        except Exception as exc:  # any store failure: skip the cache, never fail the request
            self._down_until = time.monotonic() + self.backoff_s
            if self.errors is not None:
                self.errors.store_error(self.name, op)
            log.warning("cache store %s %s failed (%s); skipping it for %.1f s", self.name, op,
                        type(exc).__name__, self.backoff_s)
            return default

    async def start(self) -> None:
        await self._guard("start", self.inner.start(), None, self.start_timeout_s)

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        return await self._guard("get", self.inner.get_exact(ns, key), None, self.timeout_s)

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        return await self._guard("nearest", self.inner.nearest(ns, vec, k), [], self.timeout_s)

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        await self._guard("put", self.inner.put(ns, key, vec, resp, ttl), None, self.write_timeout_s)

    async def stats(self) -> CacheStats:
        return await self.inner.stats()  # admin commands report store errors as they are

    async def clear(self) -> int:
        return await self.inner.clear()

    async def aclose(self) -> None:
        await self.inner.aclose()
