"""API keys in PostgreSQL: one table shared by every gateway replica (same schema as SQLite).

The gateway reads through a pooled async connection with bounded waits; keys it verified are
remembered for ``cache_s`` so a request does not pay a round trip and a short database outage
does not lock out clients already seen. A revocation therefore reaches every replica within
``cache_s``. The CLI (``blink keys --db postgresql://...``) uses plain synchronous connections.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from blink.gateway.auth.keys import _COLUMNS, ApiKey, _from_row, hash_key, key_row, new_key
from blink.protocol.errors import BackendUnavailableError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS blink_api_keys (
    key_id text PRIMARY KEY,
    key_hash text NOT NULL UNIQUE,
    tenant text NOT NULL,
    models text NOT NULL,
    requests_per_minute integer NOT NULL,
    tokens_per_minute integer NOT NULL,
    created_at double precision NOT NULL,
    revoked_at double precision
);
ALTER TABLE blink_api_keys ADD COLUMN IF NOT EXISTS scopes text NOT NULL DEFAULT '';
ALTER TABLE blink_api_keys ADD COLUMN IF NOT EXISTS max_sequences integer NOT NULL DEFAULT 0;
ALTER TABLE blink_api_keys ADD COLUMN IF NOT EXISTS max_voice_sessions integer NOT NULL DEFAULT 0;
"""


# The first lookup opens the pool: a Postgres backend is forked, authenticated and runs the schema
# DDL, which takes seconds on a loaded host. Only that first attempt gets this budget; a lookup on
# an open pool keeps ``timeout_s``, so a database that goes away still fails fast.
_COLD_START_S = 5.0


class PostgresKeyStore:
    def __init__(self, dsn: str, cache_s: float = 10.0, timeout_s: float = 0.5, pool_size: int = 4) -> None:
        self.dsn = dsn
        self.cache_s = cache_s
        self.timeout_s = timeout_s
        self.pool_size = pool_size
        self._pool: Any = None  # psycopg_pool.AsyncConnectionPool, opened on first lookup
        self._open_lock = asyncio.Lock()
        self._seen: dict[str, tuple[float, ApiKey | None]] = {}  # key hash -> (when, record)
        self._schema_ready = False
        self._tried_once = False  # the first (cold) lookup has been attempted

    # -- CLI side (synchronous) ----------------------------------------------------------------

    def _sync(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        if not self._schema_ready:
            conn.execute(_SCHEMA)
            self._schema_ready = True
        return conn

    def create(
        self, tenant: str, models: list[str] | None = None, requests_per_minute: int = 0, tokens_per_minute: int = 0,
        scopes: list[str] | None = None, max_sequences: int = 0, max_voice_sessions: int = 0,
    ) -> tuple[ApiKey, str]:
        key, secret = new_key(tenant, models, requests_per_minute, tokens_per_minute, scopes, max_sequences,
                              max_voice_sessions)
        with self._sync() as conn:
            conn.execute(f"INSERT INTO blink_api_keys (key_hash, {_COLUMNS}) "
                         "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", (hash_key(secret), *key_row(key)))
        return key, secret

    def lookup(self, secret: str) -> ApiKey | None:
        with self._sync() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM blink_api_keys WHERE key_hash = %s", (hash_key(secret),)).fetchone()
        return None if row is None or row[6] is not None else _from_row(row)

    def list(self) -> list[ApiKey]:
        with self._sync() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM blink_api_keys ORDER BY created_at").fetchall()
        return [_from_row(r) for r in rows]

    def revoke(self, key_id: str) -> bool:
        with self._sync() as conn:
            cur = conn.execute(
                "UPDATE blink_api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL", (time.time(), key_id)
            )
            return bool(cur.rowcount)

    def close(self) -> None:
        return None

    # -- gateway side (async) --------------------------------------------------------------------

    async def alookup(self, secret: str) -> ApiKey | None:
        digest = hash_key(secret)
        now = time.monotonic()
        seen = self._seen.get(digest)
        if seen is not None and now - seen[0] < self.cache_s:
            return seen[1]
        try:
            key = await self._bounded_fetch(digest)
        except Exception as exc:
            if seen is not None and seen[1] is not None:
                return seen[1]  # database unreachable: a key verified before still works
            raise BackendUnavailableError(
                "API keys cannot be checked right now (their database is unavailable); retry shortly.",
                code="key_store_unavailable", headers={"retry-after": "1"},
            ) from exc
        if len(self._seen) > 100_000:  # bound memory under a flood of random keys
            self._seen.clear()
        self._seen[digest] = (now, key)
        return key

    async def aby_id(self, key_id: str) -> ApiKey | None:
        try:
            return await self._bounded_fetch(key_id, column="key_id")
        except Exception as exc:
            raise BackendUnavailableError(
                "API keys cannot be checked right now (their database is unavailable); retry shortly.",
                code="key_store_unavailable", headers={"retry-after": "1"},
            ) from exc

    async def _bounded_fetch(self, value: str, column: str = "key_hash") -> ApiKey | None:
        budget = self.timeout_s if self._tried_once else max(self.timeout_s, _COLD_START_S)
        self._tried_once = True
        return await asyncio.wait_for(self._fetch(value, column), budget)

    async def _fetch(self, value: str, column: str = "key_hash") -> ApiKey | None:
        if self._pool is None:
            await self._open()
        async with self._pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM blink_api_keys WHERE {column} = %s", (value,))
            row = await cur.fetchone()
        return None if row is None or row[6] is not None else _from_row(row)

    async def _open(self) -> None:
        from psycopg_pool import AsyncConnectionPool

        async with self._open_lock:
            if self._pool is not None:
                return

            async def configure(conn: Any) -> None:
                await conn.set_autocommit(True)
                await conn.execute(_SCHEMA)

            pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=self.pool_size, configure=configure,
                                       open=False, timeout=max(self.timeout_s, _COLD_START_S))
            await pool.open()
            self._pool = pool

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
