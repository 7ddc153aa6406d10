"""Shared cache store: PostgreSQL + pgvector (HNSW, cosine), for several gateway replicas.

One row per entry; the exact path is a primary-key lookup, the semantic path an HNSW search
filtered by namespace (pgvector 0.8 iterative scans keep the filter from starving the top-k).
``last_used`` drives LRU eviction past ``max_entries``; expired rows are never returned and are
deleted by the eviction pass. Vectors travel as pgvector text literals, so no extra client
package is needed beyond psycopg. Queries share a ``psycopg_pool`` pool (each connection set up
for HNSW search once) and every statement carries a server-side ``statement_timeout``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats

# HNSW build parameters: pgvector's defaults (m=16, ef_construction=64) hold recall@10 above 0.95
# on sentence embeddings; ef_search=64 is a little above the default 40 for the filtered scan.
_EF_SEARCH = 64


def _vec_literal(vec: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vec, dtype=np.float32)) + "]"


class PostgresCacheStore:
    def __init__(
        self,
        dsn: str,
        max_entries: int = 100_000,
        dim: int = 384,
        table: str | None = None,
        pool_size: int = 8,
        statement_timeout_ms: int = 2000,
    ) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        # The server gives up on a statement after this (the gateway's own wait is shorter).
        self.statement_timeout_ms = statement_timeout_ms
        self.max_entries = max_entries
        self.dim = dim
        # One table per dimension: an HNSW index needs a fixed-size vector column.
        self.table = table or f"blink_cache_d{dim}"
        self._pool: Any = None  # psycopg_pool.AsyncConnectionPool, opened in start()
        self._lock = asyncio.Lock()
        self._estimate = 0

    async def start(self) -> None:
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        async with self._lock:
            if self._pool is not None:
                return
            t = self.table
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {t} (ns text NOT NULL, key bytea NOT NULL, vec vector({self.dim}),"
                    " resp bytea NOT NULL, expires_at double precision NOT NULL, last_used double precision NOT NULL,"
                    " PRIMARY KEY (ns, key))"
                )
                await conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_hnsw ON {t} USING hnsw (vec vector_cosine_ops)")
                await conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_lru ON {t} (last_used)")
                row = await (await conn.execute(f"SELECT count(*) FROM {t}")).fetchone()
                self._estimate = int(row[0]) if row else 0

            async def configure(conn: Any) -> None:
                await conn.set_autocommit(True)
                await conn.execute(f"SET hnsw.ef_search = {_EF_SEARCH}")
                await conn.execute("SET hnsw.iterative_scan = strict_order")
                await conn.execute(f"SET statement_timeout = {int(self.statement_timeout_ms)}")

            pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=self.pool_size, configure=configure, open=False)
            await pool.open(wait=True, timeout=10)
            self._pool = pool

    async def _execute(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if self._pool is None:
            await self.start()
        async with self._pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description else []

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        now = time.time()
        rows = await self._execute(
            f"UPDATE {self.table} SET last_used = %s WHERE ns = %s AND key = %s AND expires_at > %s RETURNING resp",
            (now, ns, key, now),
        )
        return CachedResponse.from_bytes(bytes(rows[0][0])) if rows else None

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        lit = _vec_literal(vec)
        rows = await self._execute(
            f"SELECT resp, 1 - (vec <=> %s::vector) FROM {self.table}"
            " WHERE ns = %s AND vec IS NOT NULL AND expires_at > %s ORDER BY vec <=> %s::vector LIMIT %s",
            (lit, ns, time.time(), lit, k),
        )
        return [(float(score), CachedResponse.from_bytes(bytes(resp))) for resp, score in rows]

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        now = time.time()
        rows = await self._execute(
            f"INSERT INTO {self.table} (ns, key, vec, resp, expires_at, last_used) VALUES (%s, %s, %s::vector, %s, %s, %s)"
            " ON CONFLICT (ns, key) DO UPDATE SET vec = EXCLUDED.vec, resp = EXCLUDED.resp,"
            " expires_at = EXCLUDED.expires_at, last_used = EXCLUDED.last_used RETURNING (xmax = 0)",
            (ns, key, None if vec is None else _vec_literal(vec), resp.to_bytes(), now + ttl, now),
        )
        if rows and rows[0][0]:
            self._estimate += 1
        if self._estimate > self.max_entries:
            await self._evict(now)

    async def _evict(self, now: float) -> None:
        """Expired rows first, then least recently used ones down to ``max_entries``."""
        t = self.table
        await self._execute(f"DELETE FROM {t} WHERE expires_at <= %s", (now,))
        count = int((await self._execute(f"SELECT count(*) FROM {t}"))[0][0])
        surplus = count - self.max_entries
        if surplus > 0:
            await self._execute(
                f"DELETE FROM {t} WHERE (ns, key) IN (SELECT ns, key FROM {t} ORDER BY last_used LIMIT %s)", (surplus,)
            )
        self._estimate = min(count, self.max_entries)

    async def stats(self) -> CacheStats:
        rows = await self._execute(
            f"SELECT count(*), count(DISTINCT ns) FROM {self.table} WHERE expires_at > %s", (time.time(),)
        )
        return CacheStats(int(rows[0][0]), int(rows[0][1]), f"postgres {self.table}")

    async def clear(self) -> int:
        rows = await self._execute(f"WITH gone AS (DELETE FROM {self.table} RETURNING 1) SELECT count(*) FROM gone")
        self._estimate = 0
        return int(rows[0][0])

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
