"""The Batch API's durable state: uploaded files, batch jobs and one row per input line.

Exactly-once results rest on one rule: a line's result is written in the same statement that
marks it done (``UPDATE ... WHERE done = 0``), so after a crash a line is either finished with
its result or still pending and run again, never both and never lost. The SQL is shared by
SQLite (default, WAL) and PostgreSQL; each runs on a worker thread so the event loop never
waits on disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson


@dataclass(slots=True)
class FileRecord:
    id: str
    purpose: str
    filename: str
    bytes: int
    created_at: int


@dataclass(slots=True)
class BatchRecord:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    status: str
    created_at: int
    metadata: dict[str, Any] | None = None
    key_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    expires_at: int | None = None
    errors: dict[str, Any] | None = None
    # request_counts, filled on read.
    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(slots=True)
class PendingLine:
    index: int
    custom_id: str
    body: dict[str, Any]


@dataclass(slots=True)
class NewLine:
    """A parsed input line: ``body`` to run, or ``error`` (then it is done from the start)."""

    index: int
    custom_id: str | None
    body: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class BatchStore(Protocol):
    async def start(self) -> None: ...
    async def aclose(self) -> None: ...
    async def put_file(self, rec: FileRecord, content: bytes) -> None: ...
    async def get_file(self, file_id: str) -> FileRecord | None: ...
    async def file_content(self, file_id: str) -> bytes | None: ...
    async def create_batch(self, rec: BatchRecord, lines: Sequence[NewLine]) -> None: ...
    async def get_batch(self, batch_id: str) -> BatchRecord | None: ...
    async def list_batches(self, after: str | None, limit: int) -> list[BatchRecord]: ...
    async def set_status(self, batch_id: str, status: str, stamp: str | None, only_from: Sequence[str] = ()) -> bool: ...
    async def active_batches(self) -> list[BatchRecord]: ...
    async def pending_lines(self, batch_id: str, limit: int, after_index: int) -> list[PendingLine]: ...
    async def complete_line(self, batch_id: str, index: int, result: dict[str, Any], is_error: bool) -> bool: ...
    async def finished_lines(self, batch_id: str, is_error: bool) -> list[bytes]: ...
    async def finalize(
        self, batch_id: str, status: str, stamp: str, outputs: dict[str, tuple[FileRecord, bytes] | None]
    ) -> None: ...


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS batch_files (
        id TEXT PRIMARY KEY, purpose TEXT NOT NULL, filename TEXT NOT NULL, bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL, content {blob} NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS batches (
        id TEXT PRIMARY KEY, input_file_id TEXT NOT NULL, endpoint TEXT NOT NULL,
        completion_window TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
        metadata TEXT, key_id TEXT, output_file_id TEXT, error_file_id TEXT,
        in_progress_at BIGINT, finalizing_at BIGINT, completed_at BIGINT, failed_at BIGINT,
        cancelling_at BIGINT, cancelled_at BIGINT, expires_at BIGINT, errors TEXT)""",
    """CREATE TABLE IF NOT EXISTS batch_lines (
        batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT, body TEXT,
        done INTEGER NOT NULL DEFAULT 0, is_error INTEGER NOT NULL DEFAULT 0, result TEXT,
        PRIMARY KEY (batch_id, idx))""",
)
_STAMPS = frozenset({"in_progress_at", "finalizing_at", "completed_at", "failed_at", "cancelling_at", "cancelled_at"})
_ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
_BATCH_COLS = (
    "id, input_file_id, endpoint, completion_window, status, created_at, metadata, key_id, output_file_id, "
    "error_file_id, in_progress_at, finalizing_at, completed_at, failed_at, cancelling_at, cancelled_at, "
    "expires_at, errors"
)
_COUNTS = (
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id), "
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id AND l.done = 1 AND l.is_error = 0), "
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id AND l.done = 1 AND l.is_error = 1)"
)


class SqlBatchStore:
    """One DB-API connection used from a worker thread under a lock (SQLite or psycopg).

    ``connect`` opens the connection; ``param`` is the driver's placeholder (``?`` or ``%s``).
    """

    def __init__(self, connect: Callable[[], Any], param: str, blob_type: str) -> None:
        self._connect = connect
        self._param = param
        self._blob = blob_type
        self._conn: Any = None
        self._lock = threading.Lock()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._param) if self._param != "?" else sql

    async def _run(self, fn: Callable[[Any], Any]) -> Any:
        def locked() -> Any:
            with self._lock:
                try:
                    result = fn(self._conn)
                    self._conn.commit()
                    return result
                except BaseException:
                    self._conn.rollback()
                    raise

        return await asyncio.to_thread(locked)

    def _exec(self, conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
        return conn.execute(self._sql(sql), tuple(args))

    async def start(self) -> None:
        if self._conn is not None:
            return
        self._conn = await asyncio.to_thread(self._connect)

        def schema(conn: Any) -> None:
            for ddl in _SCHEMA:
                self._exec(conn, ddl.format(blob=self._blob))

        await self._run(schema)

    async def aclose(self) -> None:
        # Under the lock: closing the connection while a worker thread is inside an execute on it
        # (a batch runner still finishing at shutdown) crashed the process in sqlite3 (segfault in
        # a CI run at _exec); now the close waits for the statement in flight.
        def close() -> None:
            with self._lock:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()

        if self._conn is not None:
            await asyncio.to_thread(close)

    # -- files --------------------------------------------------------------------------------

    async def put_file(self, rec: FileRecord, content: bytes) -> None:
        await self._run(lambda c: self._insert_file(c, rec, content))

    def _insert_file(self, conn: Any, rec: FileRecord, content: bytes) -> None:
        self._exec(conn, "INSERT INTO batch_files (id, purpose, filename, bytes, created_at, content) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                   (rec.id, rec.purpose, rec.filename, rec.bytes, rec.created_at, content))

    async def get_file(self, file_id: str) -> FileRecord | None:
        row = await self._run(lambda c: self._exec(
            c, "SELECT id, purpose, filename, bytes, created_at FROM batch_files WHERE id = ?", (file_id,)).fetchone())
        return None if row is None else FileRecord(*row)

    async def file_content(self, file_id: str) -> bytes | None:
        row = await self._run(lambda c: self._exec(
            c, "SELECT content FROM batch_files WHERE id = ?", (file_id,)).fetchone())
        return None if row is None else bytes(row[0])

    # -- batches ------------------------------------------------------------------------------

    async def create_batch(self, rec: BatchRecord, lines: Sequence[NewLine]) -> None:
        def create(conn: Any) -> None:
            self._exec(conn, "INSERT INTO batches (id, input_file_id, endpoint, completion_window, status, "
                             "created_at, metadata, key_id, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (rec.id, rec.input_file_id, rec.endpoint, rec.completion_window, rec.status,
                        rec.created_at, _dumps(rec.metadata), rec.key_id, rec.expires_at))
            sql = self._sql("INSERT INTO batch_lines (batch_id, idx, custom_id, body, done, is_error, result) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)")
            conn.cursor().executemany(sql, [
                (rec.id, ln.index, ln.custom_id, _dumps(ln.body), int(ln.error is not None),
                 int(ln.error is not None), _dumps(ln.error)) for ln in lines
            ])

        await self._run(create)

    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        rows = await self._run(lambda c: self._exec(
            c, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b WHERE id = ?", (batch_id,)).fetchall())
        return _batch(rows[0]) if rows else None

    async def list_batches(self, after: str | None, limit: int) -> list[BatchRecord]:
        """Newest first (OpenAI's order); ``after`` is the last id of the previous page."""
        def query(conn: Any) -> list[Any]:
            if after is None:
                return list(self._exec(conn, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b "
                                             "ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)).fetchall())
            return list(self._exec(
                conn, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b WHERE (created_at, id) < "
                      "(SELECT created_at, id FROM batches WHERE id = ?) ORDER BY created_at DESC, id DESC LIMIT ?",
                (after, limit)).fetchall())

        return [_batch(r) for r in await self._run(query)]

    async def set_status(self, batch_id: str, status: str, stamp: str | None, only_from: Sequence[str] = ()) -> bool:
        """Move a batch to ``status`` (stamping ``stamp``), only from ``only_from`` when given."""
        if stamp is not None and stamp not in _STAMPS:
            raise ValueError(f"unknown timestamp column {stamp!r}")
        sets = "status = ?" + (f", {stamp} = ?" if stamp else "")
        args: list[Any] = [status] + ([int(time.time())] if stamp else []) + [batch_id]
        where = "id = ?"
        if only_from:
            where += " AND status IN (" + ", ".join("?" * len(only_from)) + ")"
            args += list(only_from)
        cur = await self._run(lambda c: self._exec(c, f"UPDATE batches SET {sets} WHERE {where}", args))
        return bool(cur.rowcount)

    async def active_batches(self) -> list[BatchRecord]:
        marks = ", ".join("?" * len(_ACTIVE))
        rows = await self._run(lambda c: self._exec(
            c, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b WHERE status IN ({marks}) ORDER BY created_at, id",
            _ACTIVE).fetchall())
        return [_batch(r) for r in rows]

    async def pending_lines(self, batch_id: str, limit: int, after_index: int) -> list[PendingLine]:
        rows = await self._run(lambda c: self._exec(
            c, "SELECT idx, custom_id, body FROM batch_lines WHERE batch_id = ? AND done = 0 AND idx > ? "
               "ORDER BY idx LIMIT ?", (batch_id, after_index, limit)).fetchall())
        return [PendingLine(int(i), cid, orjson.loads(body)) for i, cid, body in rows]

    async def complete_line(self, batch_id: str, index: int, result: dict[str, Any], is_error: bool) -> bool:
        """Record a line's result and mark it done in one statement; False if it was done already."""
        cur = await self._run(lambda c: self._exec(
            c, "UPDATE batch_lines SET done = 1, is_error = ?, result = ? WHERE batch_id = ? AND idx = ? AND done = 0",
            (int(is_error), _dumps(result), batch_id, index)))
        return bool(cur.rowcount)

    async def finished_lines(self, batch_id: str, is_error: bool) -> list[bytes]:
        rows = await self._run(lambda c: self._exec(
            c, "SELECT result FROM batch_lines WHERE batch_id = ? AND done = 1 AND is_error = ? ORDER BY idx",
            (batch_id, int(is_error))).fetchall())
        return [r[0].encode() if isinstance(r[0], str) else bytes(r[0]) for r in rows]

    async def finalize(
        self, batch_id: str, status: str, stamp: str, outputs: dict[str, tuple[FileRecord, bytes] | None]
    ) -> None:
        """Store the output/error files and the final status in one transaction (idempotent:
        a crash before the commit leaves the batch to be finalized again)."""
        if stamp not in _STAMPS:
            raise ValueError(f"unknown timestamp column {stamp!r}")

        def fin(conn: Any) -> None:
            ids: dict[str, str | None] = {}
            for col, out in outputs.items():
                ids[col] = None
                if out is not None:
                    self._insert_file(conn, out[0], out[1])
                    ids[col] = out[0].id
            self._exec(conn, f"UPDATE batches SET status = ?, {stamp} = ?, output_file_id = ?, error_file_id = ? "
                             "WHERE id = ?",
                       (status, int(time.time()), ids.get("output_file_id"), ids.get("error_file_id"), batch_id))

        await self._run(fin)


def _dumps(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _batch(row: Sequence[Any]) -> BatchRecord:
    (bid, input_file_id, endpoint, window, status, created_at, metadata, key_id, output_file_id, error_file_id,
     in_progress_at, finalizing_at, completed_at, failed_at, cancelling_at, cancelled_at, expires_at, errors,
     total, completed, failed) = row
    return BatchRecord(
        id=bid, input_file_id=input_file_id, endpoint=endpoint, completion_window=window, status=status,
        created_at=int(created_at), metadata=orjson.loads(metadata) if metadata else None, key_id=key_id,
        output_file_id=output_file_id, error_file_id=error_file_id, in_progress_at=in_progress_at,
        finalizing_at=finalizing_at, completed_at=completed_at, failed_at=failed_at, cancelling_at=cancelling_at,
        cancelled_at=cancelled_at, expires_at=expires_at, errors=orjson.loads(errors) if errors else None,
        total=int(total), completed=int(completed), failed=int(failed),
    )


def sqlite_batch_store(path: str | Path) -> SqlBatchStore:
    """SQLite in WAL mode: a committed line survives a kill -9 of the server (not only a clean exit)."""
    target = Path(path).expanduser()

    def connect() -> sqlite3.Connection:
        target.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(target), check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: WAL commits survive a process crash; only an OS crash could lose the last ones.
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return SqlBatchStore(connect, "?", "BLOB")


def postgres_batch_store(dsn: str) -> SqlBatchStore:
    """The shared store (several gateway replicas read the same jobs and files)."""

    def connect() -> Any:
        import psycopg

        return psycopg.connect(dsn)

    return SqlBatchStore(connect, "%s", "BYTEA")
