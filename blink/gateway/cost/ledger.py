"""Spend counters per (month, API key, model), kept in memory and written behind to SQLite.

Budgets are checked on every request, so reads come from memory; writes are batched by a
background task (every ``flush_s``) so the request path never waits on disk. The ledger is
per gateway process (a shared store for several replicas is future work).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from blink.private_files import private_sqlite_path
from blink.tasks import cancel_and_wait

# Write-behind interval: a crash loses at most this much accounting.
_FLUSH_S = 1.0

_SCHEMA = """CREATE TABLE IF NOT EXISTS usage (
    month TEXT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0, cache_hits INTEGER NOT NULL DEFAULT 0, saved_usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (month, key_id, model))"""


@dataclass(slots=True)
class UsageRow:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    saved_usd: float = 0.0

    def add(self, other: UsageRow) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


_COLS = [f.name for f in fields(UsageRow)]
Key = tuple[str, str, str]  # (month, key_id, model)


def current_month(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m")


class SpendLedger:
    def __init__(self, path: str | Path | None, flush_s: float = _FLUSH_S) -> None:
        self._path = Path(path).expanduser() if path else None
        self._flush_s = flush_s
        self._rows: dict[Key, UsageRow] = {}
        self._dirty: dict[Key, UsageRow] = {}
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._path is None or self._conn is not None:
            return
        self._conn = await asyncio.to_thread(_open, self._path)
        for row in await asyncio.to_thread(self.read_all):
            self._rows[(row[0], row[1], row[2])] = UsageRow(*row[3:])
        self._task = asyncio.create_task(self._flush_loop(), name="blink-spend-ledger")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.flush()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.to_thread(conn.close)

    def record(self, key_id: str, model: str, delta: UsageRow) -> None:
        k = (current_month(), key_id, model)
        self._rows.setdefault(k, UsageRow()).add(delta)
        if self._path is not None:
            self._dirty.setdefault(k, UsageRow()).add(delta)

    def month_spend(self, key_id: str) -> float:
        month = current_month()
        return sum(r.cost_usd for (m, k, _), r in self._rows.items() if m == month and k == key_id)

    def rows(self) -> dict[Key, UsageRow]:
        return dict(self._rows)

    async def flush(self) -> None:
        if self._conn is None or not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        await asyncio.to_thread(self._write, dirty)

    def _write(self, dirty: dict[Key, UsageRow]) -> None:
        conn = self._conn
        if conn is None:
            return
        sets = ", ".join(f"{c} = {c} + excluded.{c}" for c in _COLS)
        sql = (f"INSERT INTO usage (month, key_id, model, {', '.join(_COLS)}) VALUES ({', '.join('?' * (3 + len(_COLS)))}) "
               f"ON CONFLICT (month, key_id, model) DO UPDATE SET {sets}")
        with self._lock, conn:
            conn.executemany(sql, [(*k, *(getattr(r, c) for c in _COLS)) for k, r in dirty.items()])

    def read_all(self) -> list[tuple[object, ...]]:
        if self._conn is None:
            return []
        with self._lock:
            return list(self._conn.execute(f"SELECT month, key_id, model, {', '.join(_COLS)} FROM usage"))

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush_s)
            await self.flush()


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(private_sqlite_path(path)), check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(_SCHEMA)
    conn.commit()
    return conn


def read_usage(path: str | Path) -> list[tuple[object, ...]]:
    """Rows (month, key_id, model, counters...) for ``blink usage``; [] when nothing was recorded."""
    target = Path(path).expanduser()
    if not target.exists():
        return []
    conn = _open(target)
    try:
        return list(conn.execute(f"SELECT month, key_id, model, {', '.join(_COLS)} FROM usage "
                                 "ORDER BY month, key_id, model"))
    finally:
        conn.close()


USAGE_COLUMNS = _COLS
