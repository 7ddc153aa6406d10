"""The embedded default: the in-process index, persisted to a SQLite file in WAL mode.

Reads never touch SQLite (the memory store answers them); every write is committed on one
writer thread before ``put`` returns, so an acknowledged entry survives ``kill -9``. WAL with
``synchronous=NORMAL`` is crash-safe for the process (not for power loss, which needs
``synchronous=FULL``: set ``durable=True``). Entries are loaded back at start.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.store import CacheStats
from blink.gateway.cache.stores.memory import MemoryCacheStore
from blink.gateway.cache.vector_index import DEFAULT_HNSW_THRESHOLD
from blink.private_files import private_sqlite_path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cache_entries (
    ns TEXT NOT NULL,
    key BLOB NOT NULL,
    vec BLOB,
    resp BLOB NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (ns, key)
)
"""


class SQLiteCacheStore:
    def __init__(
        self,
        path: str | Path,
        max_entries: int = 100_000,
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        durable: bool = False,
    ) -> None:
        self.path = Path(path)
        self._mem = MemoryCacheStore(max_entries, hnsw_threshold)
        self._durable = durable
        # One writer thread: SQLite allows one writer anyway, and it keeps write order = call order.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blink-cache-sqlite")
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        async with self._lock:
            if self._db is None:
                await self._run(self._open)

    def _open(self) -> None:
        db = sqlite3.connect(private_sqlite_path(self.path), check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
        db.execute(_SCHEMA)
        now = time.time()
        db.execute("DELETE FROM cache_entries WHERE expires_at <= ?", (now,))
        rows = db.execute("SELECT ns, key, vec, resp, expires_at FROM cache_entries ORDER BY rowid")
        evicted: list[tuple[str, bytes]] = []
        for ns, key, vec, resp, expires_at in rows:
            v = None if vec is None else np.frombuffer(vec, dtype=np.float32)
            evicted += self._mem.put_sync(ns, bytes(key), v, CachedResponse.from_bytes(resp), expires_at)
        if evicted:
            db.executemany("DELETE FROM cache_entries WHERE ns = ? AND key = ?", evicted)
        self._mem.build_indexes()
        self._db = db

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def get_exact(self, ns: str, key: bytes) -> CachedResponse | None:
        return self._mem.get_exact_sync(ns, key)

    async def nearest(self, ns: str, vec: np.ndarray, k: int) -> list[tuple[float, CachedResponse]]:
        return self._mem.nearest_sync(ns, vec, k)

    async def put(self, ns: str, key: bytes, vec: np.ndarray | None, resp: CachedResponse, ttl: float) -> None:
        await self.start()
        expires_at = time.time() + ttl
        vec32 = None if vec is None else np.asarray(vec, dtype=np.float32)
        evicted = self._mem.put_sync(ns, key, vec32, resp, expires_at)
        row = (ns, key, None if vec32 is None else vec32.tobytes(), resp.to_bytes(), expires_at)
        await self._run(self._write, row, evicted)

    async def put_many(
        self, items: list[tuple[str, bytes, np.ndarray | None, CachedResponse]], ttl: float
    ) -> None:
        """Bulk insert in one transaction (``blink cache warm``, benchmarks)."""
        await self.start()
        expires_at = time.time() + ttl
        rows: list[tuple[object, ...]] = []
        evicted: list[tuple[str, bytes]] = []
        for ns, key, vec, resp in items:
            vec32 = None if vec is None else np.asarray(vec, dtype=np.float32)
            evicted += self._mem.put_sync(ns, key, vec32, resp, expires_at)
            rows.append((ns, key, None if vec32 is None else vec32.tobytes(), resp.to_bytes(), expires_at))
        await self._run(self._write_many, rows, evicted)

    def _write_many(self, rows: list[tuple[object, ...]], evicted: list[tuple[str, bytes]]) -> None:
        db = self._db
        if db is None:
            raise RuntimeError("the SQLite cache store is closed")
        db.execute("BEGIN")
        try:
            db.executemany("INSERT OR REPLACE INTO cache_entries (ns, key, vec, resp, expires_at) VALUES (?, ?, ?, ?, ?)", rows)
            db.executemany("DELETE FROM cache_entries WHERE ns = ? AND key = ?", evicted)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _write(self, row: tuple[object, ...], evicted: list[tuple[str, bytes]]) -> None:
        db = self._db
        if db is None:
            raise RuntimeError("the SQLite cache store is closed")
        db.execute("BEGIN")
        try:
            db.execute("INSERT OR REPLACE INTO cache_entries (ns, key, vec, resp, expires_at) VALUES (?, ?, ?, ?, ?)", row)
            if evicted:
                db.executemany("DELETE FROM cache_entries WHERE ns = ? AND key = ?", evicted)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def stats(self) -> CacheStats:
        s = self._mem.stats_sync()
        s.detail = f"sqlite {self.path}"
        return s

    async def clear(self) -> int:
        await self.start()
        n = self._mem.clear_sync()
        await self._run(self._clear)
        return n

    def _clear(self) -> None:
        if self._db is not None:
            self._db.execute("DELETE FROM cache_entries")

    async def aclose(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await self._run(db.close)
        self._writer.shutdown(wait=True)
