"""Stored responses: what ``store: true`` keeps, for ``GET``, ``input_items`` and ``previous_response_id``.

A row holds one response: its input items, the response object (with its output items), its owner
(``key_id``, ``tenant``; None when auth is off) and the id of the response it continued. A later
turn replays the conversation by walking ``previous_id`` links back (``chain``), so each turn is
stored once rather than the whole history again on every turn.

Two bounds keep the store from growing without limit: a TTL (``expires_at``; an expired row is
gone for every reader at once and deleted on the next write) and a byte budget per tenant: a new
row that would take its tenant past it evicts that tenant's oldest rows first (a chain that loses
an early turn then answers 404 for it), and a single row larger than the whole budget is not
stored (the response says ``store: false``). The SQL runs on SQLite (default, WAL) or PostgreSQL,
on a worker thread so the event loop never waits on disk (the batch store's pattern). Writes come
in batches (``put_many``: one transaction, one expiry sweep, one budget sum per tenant) because the
gateway writes behind (``write_behind.py``): a commit, a sweep and a budget sum per response were
what made a stored response cost several times a chat completion.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import orjson

from blink.gateway.storage.sql import POSTGRES, SQLITE, SqlStore, postgres_connect, sqlite_connect

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY, key_id TEXT, tenant TEXT, created_ns BIGINT NOT NULL, expires_at BIGINT,
        previous_id TEXT, bytes BIGINT NOT NULL, input {blob} NOT NULL, body {blob} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS responses_tenant ON responses (tenant, created_ns)",
    "CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at)",
    # Covers the per-tenant byte sum the budget needs on every batch (an index scan, not a table scan).
    "CREATE INDEX IF NOT EXISTS responses_tenant_bytes ON responses (tenant, bytes)",
)
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
# Spelled so that the expiry index serves the sweep (NULL never compares true: never expires).
_EXPIRED = "expires_at <= ?"
_COLS = "id, key_id, tenant, created_ns, expires_at, previous_id, input, body"


@dataclass(slots=True)
class StoredResponse:
    id: str
    key_id: str | None
    tenant: str | None
    input_items: list[dict[str, Any]]
    response: dict[str, Any]
    previous_id: str | None = None
    expires_at: int | None = None
    created_ns: int = 0


@dataclass(slots=True)
class PendingWrite:
    """A response ready to write: encoded once, so its size is known before anything is written."""

    rec: StoredResponse
    input_blob: bytes
    body_blob: bytes
    budget_bytes: int | None

    @property
    def size(self) -> int:
        return len(self.input_blob) + len(self.body_blob)

    def decoded(self) -> StoredResponse:
        """A fresh copy, as a read from the database gives: readers never share the writer's dicts."""
        r = self.rec
        return StoredResponse(r.id, r.key_id, r.tenant, orjson.loads(self.input_blob), orjson.loads(self.body_blob),
                              r.previous_id, r.expires_at, r.created_ns)


def encode(rec: StoredResponse, budget_bytes: int | None) -> PendingWrite | None:
    """``rec`` ready to write; None when it alone exceeds ``budget_bytes`` (it is never stored)."""
    w = PendingWrite(rec, orjson.dumps(rec.input_items), orjson.dumps(rec.response), budget_bytes)
    if budget_bytes is not None and w.size > budget_bytes:
        return None
    rec.created_ns = rec.created_ns or time.time_ns()
    return w


class ResponseStore(Protocol):
    async def start(self) -> None: ...
    async def aclose(self) -> None: ...
    async def put(self, rec: StoredResponse, budget_bytes: int | None) -> bool: ...
    async def get(self, response_id: str) -> StoredResponse | None: ...
    async def chain(self, response_id: str, max_depth: int) -> list[StoredResponse] | None: ...
    async def delete(self, response_id: str) -> bool: ...
    async def tenant_bytes(self, tenant: str | None) -> int: ...


class SqlResponseStore(SqlStore):
    """The responses table on ``SqlStore``'s connection (SQLite or psycopg)."""

    def _schema(self, conn: Any) -> None:
        for ddl in _SCHEMA:
            self._exec(conn, ddl.format(blob=self._blob))

    async def put(self, rec: StoredResponse, budget_bytes: int | None) -> bool:
        """Store ``rec``, evicting its tenant's oldest rows to stay within ``budget_bytes``.

        False (nothing stored, nothing evicted) when the row alone exceeds the budget.
        """
        w = encode(rec, budget_bytes)
        if w is None:
            return False
        await self.put_many([w])
        return True

    async def put_many(self, writes: Sequence[PendingWrite]) -> None:
        """Write ``writes`` in order in one transaction, each within its tenant's budget."""
        if writes:
            await self._run(partial(self._write, writes=writes))

    def _write(self, conn: Any, writes: Sequence[PendingWrite]) -> None:
        self._exec(conn, f"DELETE FROM responses WHERE {_EXPIRED}", (int(time.time()),))
        used: dict[str, int] = {}
        for w in writes:
            rec, tenant = w.rec, w.rec.tenant or ""
            if w.budget_bytes is not None:
                if tenant not in used:
                    used[tenant] = self._used(conn, tenant)
                allowed = w.budget_bytes - w.size
                if used[tenant] > allowed:
                    used[tenant] = self._evict(conn, tenant, used[tenant], allowed)
                used[tenant] += w.size
            self._exec(conn, f"INSERT INTO responses ({_COLS}, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (rec.id, rec.key_id, tenant, rec.created_ns, rec.expires_at, rec.previous_id, w.input_blob,
                        w.body_blob, w.size))

    def _used(self, conn: Any, tenant: str) -> int:
        return int(self._exec(conn, "SELECT COALESCE(SUM(bytes), 0) FROM responses WHERE tenant = ?",
                              (tenant,)).fetchone()[0])

    def _evict(self, conn: Any, tenant: str, used: int, allowed: int) -> int:
        """Delete the tenant's oldest rows until it uses at most ``allowed`` bytes; what it uses then."""
        rows = self._exec(conn, "SELECT id, bytes FROM responses WHERE tenant = ? ORDER BY created_ns", (tenant,))
        victims: list[str] = []
        for rid, size in rows.fetchall():
            if used <= allowed:
                break
            victims.append(rid)
            used -= int(size)
        for rid in victims:
            self._exec(conn, "DELETE FROM responses WHERE id = ?", (rid,))
        return used

    async def get(self, response_id: str) -> StoredResponse | None:
        def get(conn: Any) -> StoredResponse | None:
            return self._get(conn, response_id, int(time.time()))

        result: StoredResponse | None = await self._run(get)
        return result

    def _get(self, conn: Any, response_id: str, now: int) -> StoredResponse | None:
        row = self._exec(conn, f"SELECT {_COLS} FROM responses WHERE id = ? AND {_LIVE}", (response_id, now)).fetchone()
        return None if row is None else _record(row)

    async def chain(self, response_id: str, max_depth: int) -> list[StoredResponse] | None:
        """``response_id`` and the responses it continued, oldest first; None if any link is gone
        (deleted, expired, evicted) or the chain is longer than ``max_depth``."""
        def walk(conn: Any) -> list[StoredResponse] | None:
            now = int(time.time())
            out: list[StoredResponse] = []
            next_id: str | None = response_id
            while next_id is not None:
                if len(out) >= max_depth:
                    return None
                rec = self._get(conn, next_id, now)
                if rec is None:
                    return None
                out.append(rec)
                next_id = rec.previous_id
            out.reverse()
            return out

        result: list[StoredResponse] | None = await self._run(walk)
        return result

    async def delete(self, response_id: str) -> bool:
        def delete(conn: Any) -> bool:
            return bool(self._exec(conn, "DELETE FROM responses WHERE id = ?", (response_id,)).rowcount)

        result: bool = await self._run(delete)
        return result

    async def tenant_bytes(self, tenant: str | None) -> int:
        result: int = await self._run(partial(self._used, tenant=tenant or ""))
        return result


def _record(row: Sequence[Any]) -> StoredResponse:
    rid, key_id, tenant, created_ns, expires_at, previous_id, input_blob, body_blob = row
    return StoredResponse(rid, key_id, tenant or None, orjson.loads(input_blob), orjson.loads(body_blob),
                          previous_id, None if expires_at is None else int(expires_at), int(created_ns))


def sqlite_response_store(path: str | Path) -> SqlResponseStore:
    return SqlResponseStore(sqlite_connect(path), *SQLITE)


def postgres_response_store(dsn: str) -> SqlResponseStore:
    """Shared by every gateway replica: a turn may land on any of them."""
    return SqlResponseStore(postgres_connect(dsn), *POSTGRES)
