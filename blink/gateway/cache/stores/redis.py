"""Shared exact cache: Redis >= 6 or Valkey, plain commands and Lua (no modules).

Each entry is one string key (``SET ... PX ttl``, so Redis expires it); a sorted set scored by
last use drives LRU eviction past ``max_entries`` inside the same Lua call as the write, so
two gateway replicas never evict past each other. Every key shares one hash tag, which keeps
the scripts valid on Redis Cluster (all keys in one slot). Vectors are not kept here:
``nearest`` finds nothing; pair this store with PostgreSQL for the semantic cache
(``TieredCacheStore``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats

# LRU order is a logical clock (INCR), shared by every replica and free of clock-skew ties.
# GET + touch the LRU score only if the entry is still live.
_GET = """
local v = redis.call('GET', KEYS[1])
if v then redis.call('ZADD', KEYS[2], 'XX', redis.call('INCR', KEYS[3]), KEYS[1]) end
return v
"""
# SET with TTL, score it, then pop the least recently used members until within max_entries.
_PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), KEYS[1])
local surplus = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if surplus > 0 then
  local gone = redis.call('ZPOPMIN', KEYS[2], surplus)
  for i = 1, #gone, 2 do redis.call('DEL', gone[i]) end
end
return 0
"""
# Drop index members whose entry expired; return the live members.
_LIVE = """
local live = {}
for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', k) == 1 then live[#live + 1] = k else redis.call('ZREM', KEYS[1], k) end
end
return live
"""
_CLEAR = """
local n = 0
for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do n = n + redis.call('DEL', k) end
redis.call('DEL', KEYS[1])
return n
"""


class RedisCacheStore:
    def __init__(
        self,
        url: str,
        max_entries: int = 100_000,
        prefix: str = "blink",
        timeout_s: float = 0.05,
        max_connections: int = 64,
    ) -> None:
        self.url = url
        self.max_entries = max_entries
        self._tag = f"{prefix}:{{cache}}:"  # one hash tag: every key in one cluster slot
        self._lru = self._tag + "lru"
        self._clock = self._tag + "clock"
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self._client: Any = None  # redis.asyncio.Redis, made in start()
        self._scripts: dict[str, Any] = {}

    async def start(self) -> None:
        if self._client is not None:
            return
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # The pool bounds connections per gateway; the socket timeouts bound every wait; no
        # retries: a failed lookup is a miss, and the caller backs off from the store.
        self._client = aioredis.Redis.from_url(
            self.url, max_connections=self._max_connections, socket_timeout=self._timeout_s,
            socket_connect_timeout=self._timeout_s, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
        self._scripts = {name: self._client.register_script(src) for name, src in
                         (("get", _GET), ("put", _PUT), ("live", _LIVE), ("clear", _CLEAR))}

    def _key(self, ns: str, key: bytes) -> str:
        return f"{self._tag}e:{ns}:{key.hex()}"

    async def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if self._client is None:
            await self.start()
        return await self._scripts[name](keys=keys, args=args)

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        raw = await self._call("get", [self._key(ns, key), self._lru, self._clock], [])
        return None if raw is None else CachedResponse.from_bytes(bytes(raw))

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        return []

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        ttl_ms = max(1, int(ttl * 1000))
        await self._call("put", [self._key(ns, key), self._lru, self._clock], [resp.to_bytes(), ttl_ms, self.max_entries])

    async def stats(self) -> CacheStats:
        live = await self._call("live", [self._lru], [])
        prefix = len(self._tag) + 2
        namespaces = {bytes(k).decode()[prefix:].rsplit(":", 1)[0] for k in live}
        return CacheStats(len(live), len(namespaces), f"redis {self.url}")

    async def clear(self) -> int:
        return int(await self._call("clear", [self._lru], []))

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
