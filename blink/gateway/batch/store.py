"""The Batch API's durable state: uploaded files, batch jobs and one row per input line.

Exactly-once results rest on one rule: a line's result is written in the same statement that
marks it done (``UPDATE ... WHERE done = 0``), so after a crash a line is either finished with
its result or still pending and run again, never both and never lost. The SQL is shared by
SQLite (default, WAL) and PostgreSQL; each runs on a worker thread so the event loop never
waits on disk.

A file's content is stored in chunks of ``CHUNK_BYTES`` rows (``batch_file_chunks``), written
from and read back to a stream, so neither an upload nor a download, nor the parse of a batch's
input, ever holds a whole file in memory. Every file and batch records its owner (``key_id``,
``tenant``; both None when auth is off); the store filters by owner where asked, and the routes
decide who may ask (``access.py``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson

from blink.gateway.storage.sql import POSTGRES, SQLITE, SqlStore, postgres_connect, sqlite_connect

# Rows of file content: small enough that a read or write holds little memory, large enough
# that a 200 MB file is a few hundred rows.
CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class FileRecord:
    id: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    key_id: str | None = None  # the owner key; None when auth is off (one anonymous owner)
    tenant: str | None = None
    expires_at: int | None = None  # None = kept until deleted


class StorageQuotaExceeded(Exception):
    """Storing a file would take its tenant past ``quota`` bytes (``used`` already stored)."""

    def __init__(self, used: int, quota: int) -> None:
        super().__init__(f"{used} of {quota} bytes used")
        self.used = used
        self.quota = quota


@dataclass(slots=True)
class BatchRecord:
    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    status: str
    created_at: int
    metadata: dict[str, Any] | None = None
    key_id: str | None = None  # the owner key (its lines run as this key)
    tenant: str | None = None
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


# Parses a file's content (its chunks, in order) into lines; runs on the store's worker thread.
LineParser = Callable[[Iterator[bytes]], Iterable[NewLine]]


class BatchStore(Protocol):
    async def start(self) -> None: ...
    async def aclose(self) -> None: ...
    async def put_file(self, rec: FileRecord, source: BinaryIO, quota_bytes: int | None = None) -> None: ...
    async def get_file(self, file_id: str) -> FileRecord | None: ...
    async def file_content(self, file_id: str) -> bytes | None: ...
    def file_chunks(self, file_id: str) -> AsyncIterator[bytes]: ...
    async def list_files(self, owner: str | None, purpose: str | None, after: str | None, limit: int,
                         newest_first: bool) -> list[FileRecord]: ...
    async def delete_file(self, file_id: str) -> bool: ...
    async def delete_expired_files(self, now: int) -> int: ...
    async def tenant_usage(self, tenant: str | None) -> int: ...
    async def create_batch(self, rec: BatchRecord, lines: Iterable[NewLine]) -> None: ...
    async def create_batch_from_file(self, rec: BatchRecord, parse: LineParser) -> None: ...
    async def get_batch(self, batch_id: str) -> BatchRecord | None: ...
    async def list_batches(self, after: str | None, limit: int, owner: str | None = None) -> list[BatchRecord]: ...
    async def set_status(self, batch_id: str, status: str, stamp: str | None, only_from: Sequence[str] = ()) -> bool: ...
    async def active_batches(self) -> list[BatchRecord]: ...
    async def pending_lines(self, batch_id: str, limit: int, after_index: int) -> list[PendingLine]: ...
    async def complete_line(self, batch_id: str, index: int, result: dict[str, Any], is_error: bool) -> bool: ...
    async def finished_lines(self, batch_id: str, is_error: bool) -> list[bytes]: ...
    async def finalize(
        self, batch_id: str, status: str, stamp: str, outputs: dict[str, tuple[FileRecord, bytes] | None]
    ) -> None: ...


_SCHEMA = (
    # ``content`` holds the whole file only in rows written before chunked storage; new rows
    # keep it empty and store their bytes in ``batch_file_chunks``.
    """CREATE TABLE IF NOT EXISTS batch_files (
        id TEXT PRIMARY KEY, purpose TEXT NOT NULL, filename TEXT NOT NULL, bytes BIGINT NOT NULL,
        created_at BIGINT NOT NULL, content {blob} NOT NULL, key_id TEXT, tenant TEXT, expires_at BIGINT)""",
    """CREATE TABLE IF NOT EXISTS batch_file_chunks (
        file_id TEXT NOT NULL, seq INTEGER NOT NULL, data {blob} NOT NULL, PRIMARY KEY (file_id, seq))""",
    """CREATE TABLE IF NOT EXISTS batches (
        id TEXT PRIMARY KEY, input_file_id TEXT NOT NULL, endpoint TEXT NOT NULL,
        completion_window TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
        metadata TEXT, key_id TEXT, output_file_id TEXT, error_file_id TEXT,
        in_progress_at BIGINT, finalizing_at BIGINT, completed_at BIGINT, failed_at BIGINT,
        cancelling_at BIGINT, cancelled_at BIGINT, expires_at BIGINT, errors TEXT, tenant TEXT)""",
    """CREATE TABLE IF NOT EXISTS batch_lines (
        batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT, body TEXT,
        done INTEGER NOT NULL DEFAULT 0, is_error INTEGER NOT NULL DEFAULT 0, result TEXT,
        PRIMARY KEY (batch_id, idx))""",
)
# Columns added after the first release: a store written by an older Blink gains them on open
# (its rows have no owner, so with auth on only an admin key sees them).
_ADDED_COLUMNS = (
    ("batch_files", "key_id", "TEXT"), ("batch_files", "tenant", "TEXT"), ("batch_files", "expires_at", "BIGINT"),
    ("batches", "tenant", "TEXT"),
)
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS batch_files_tenant ON batch_files (tenant)",
    "CREATE INDEX IF NOT EXISTS batch_files_expiry ON batch_files (expires_at)",
    "CREATE INDEX IF NOT EXISTS batches_owner ON batches (key_id)",
)
# Line rows per executemany when creating a batch.
_INSERT_SLICE = 1000
_FILE_COLS = "id, purpose, filename, bytes, created_at, key_id, tenant, expires_at"
# A file past its expiry is gone for every reader at once, before the sweep deletes its rows.
_LIVE_FILE = "(expires_at IS NULL OR expires_at > ?)"
_STAMPS = frozenset({"in_progress_at", "finalizing_at", "completed_at", "failed_at", "cancelling_at", "cancelled_at"})
_ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
_BATCH_COLS = (
    "id, input_file_id, endpoint, completion_window, status, created_at, metadata, key_id, output_file_id, "
    "error_file_id, in_progress_at, finalizing_at, completed_at, failed_at, cancelling_at, cancelled_at, "
    "expires_at, errors, tenant"
)
_COUNTS = (
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id), "
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id AND l.done = 1 AND l.is_error = 0), "
    "(SELECT COUNT(*) FROM batch_lines l WHERE l.batch_id = b.id AND l.done = 1 AND l.is_error = 1)"
)


class SqlBatchStore(SqlStore):
    """The Batch API's tables on ``SqlStore``'s connection (SQLite or psycopg)."""

    def _schema(self, conn: Any) -> None:
        for ddl in _SCHEMA:
            self._exec(conn, ddl.format(blob=self._blob))
        for table, column, decl in _ADDED_COLUMNS:
            present = {d[0] for d in self._exec(conn, f"SELECT * FROM {table} LIMIT 0").description}
            if column not in present:
                self._exec(conn, f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        for ddl in _INDEXES:
            self._exec(conn, ddl)

    # -- files --------------------------------------------------------------------------------

    async def put_file(self, rec: FileRecord, source: BinaryIO, quota_bytes: int | None = None) -> None:
        """Store ``rec.bytes`` bytes read from ``source`` in chunks; with ``quota_bytes``, refuse
        (``StorageQuotaExceeded``) if the tenant's files would exceed it, checked in the same
        transaction as the insert so concurrent uploads cannot both slip under it."""
        def put(conn: Any) -> None:
            if quota_bytes is not None:
                used = self._usage(conn, rec.tenant)
                if used + rec.bytes > quota_bytes:
                    raise StorageQuotaExceeded(used, quota_bytes)
            self._insert_file(conn, rec, iter(lambda: source.read(CHUNK_BYTES), b""))

        await self._run(put)

    def _insert_file(self, conn: Any, rec: FileRecord, chunks: Iterable[bytes]) -> None:
        self._exec(conn, "INSERT INTO batch_files (id, purpose, filename, bytes, created_at, content, key_id, "
                         "tenant, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (rec.id, rec.purpose, rec.filename, rec.bytes, rec.created_at, b"", rec.key_id, rec.tenant,
                    rec.expires_at))
        for seq, chunk in enumerate(_rechunk(chunks)):
            self._exec(conn, "INSERT INTO batch_file_chunks (file_id, seq, data) VALUES (?, ?, ?)",
                       (rec.id, seq, chunk))

    def _usage(self, conn: Any, tenant: str | None) -> int:
        row = self._exec(conn, "SELECT COALESCE(SUM(bytes), 0) FROM batch_files WHERE COALESCE(tenant, '') = ?",
                         (tenant or "",)).fetchone()
        return int(row[0])

    async def tenant_usage(self, tenant: str | None) -> int:
        """Bytes stored for ``tenant`` (None: the anonymous owner), uploads and batch results alike."""
        return int(await self._run(lambda c: self._usage(c, tenant)))

    async def get_file(self, file_id: str) -> FileRecord | None:
        row = await self._run(lambda c: self._exec(
            c, f"SELECT {_FILE_COLS} FROM batch_files WHERE id = ? AND {_LIVE_FILE}",
            (file_id, int(time.time()))).fetchone())
        return None if row is None else _file(row)

    async def list_files(self, owner: str | None, purpose: str | None, after: str | None, limit: int,
                         newest_first: bool) -> list[FileRecord]:
        """Live files of ``owner`` (a key id; "" = the anonymous owner; None = everyone's), by
        creation time; ``after`` is the last id of the previous page."""
        where, args = [_LIVE_FILE], [int(time.time())]
        if purpose is not None:
            where.append("purpose = ?")
            args.append(purpose)
        cmp, order = ("<", "DESC") if newest_first else (">", "ASC")
        _owned_page(where, args, owner, after, "batch_files", cmp)
        rows = await self._run(lambda c: self._exec(
            c, f"SELECT {_FILE_COLS} FROM batch_files WHERE {' AND '.join(where)} "
               f"ORDER BY created_at {order}, id {order} LIMIT ?", [*args, limit]).fetchall())
        return [_file(r) for r in rows]

    async def file_content(self, file_id: str) -> bytes | None:
        """The whole content (small files and tests; the HTTP download streams ``file_chunks``)."""
        if await self.get_file(file_id) is None:
            return None
        return b"".join([chunk async for chunk in self.file_chunks(file_id)])

    async def file_chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The content chunk by chunk, one worker-thread read each (bounded memory)."""
        seq = 0
        while True:
            chunk = await self._run(lambda c, n=seq: self._chunk(c, file_id, n))
            if chunk is None:
                return
            yield chunk
            seq += 1

    def _chunk(self, conn: Any, file_id: str, seq: int) -> bytes | None:
        row = self._exec(conn, "SELECT data FROM batch_file_chunks WHERE file_id = ? AND seq = ?",
                         (file_id, seq)).fetchone()
        if row is not None:
            return bytes(row[0])
        if seq == 0:  # a file stored whole by an older Blink
            legacy = self._exec(conn, "SELECT content FROM batch_files WHERE id = ?", (file_id,)).fetchone()
            if legacy is not None and len(legacy[0]):
                return bytes(legacy[0])
        return None

    def _chunks_sync(self, conn: Any, file_id: str) -> Iterator[bytes]:
        seq = 0
        while (chunk := self._chunk(conn, file_id, seq)) is not None:
            yield chunk
            seq += 1

    async def delete_file(self, file_id: str) -> bool:
        """Delete a file and its content; False if there was none. A batch made from it keeps
        running: its lines were copied into the batch when it was created."""
        return bool(await self._run(lambda c: self._delete_files(c, [file_id])))

    async def delete_expired_files(self, now: int) -> int:
        """Delete every file whose expiry is at or before ``now``; the number deleted."""
        def sweep(conn: Any) -> int:
            ids = [r[0] for r in self._exec(
                conn, "SELECT id FROM batch_files WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))]
            return self._delete_files(conn, ids)

        return int(await self._run(sweep))

    def _delete_files(self, conn: Any, ids: Sequence[str]) -> int:
        deleted = 0
        for file_id in ids:
            self._exec(conn, "DELETE FROM batch_file_chunks WHERE file_id = ?", (file_id,))
            deleted += self._exec(conn, "DELETE FROM batch_files WHERE id = ?", (file_id,)).rowcount
        return deleted

    # -- batches ------------------------------------------------------------------------------

    async def create_batch(self, rec: BatchRecord, lines: Iterable[NewLine]) -> None:
        await self._run(lambda c: self._create_batch(c, rec, lines))

    async def create_batch_from_file(self, rec: BatchRecord, parse: LineParser) -> None:
        """Create a batch from its input file, parsed by ``parse`` as it is read, in one
        transaction on the worker thread: a 200 MB file never stalls the event loop or sits in
        memory whole. An exception from ``parse`` (a file over the line limit) creates nothing."""
        await self._run(lambda c: self._create_batch(c, rec, parse(self._chunks_sync(c, rec.input_file_id))))

    def _create_batch(self, conn: Any, rec: BatchRecord, lines: Iterable[NewLine]) -> None:
        self._exec(conn, "INSERT INTO batches (id, input_file_id, endpoint, completion_window, status, "
                         "created_at, metadata, key_id, expires_at, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (rec.id, rec.input_file_id, rec.endpoint, rec.completion_window, rec.status,
                    rec.created_at, _dumps(rec.metadata), rec.key_id, rec.expires_at, rec.tenant))
        sql = self._sql("INSERT INTO batch_lines (batch_id, idx, custom_id, body, done, is_error, result) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)")
        # In slices: ``lines`` may read the file on this connection as it goes, which must not
        # happen inside an executemany (psycopg holds the connection's lock through it).
        rows = ((rec.id, ln.index, ln.custom_id, _dumps(ln.body), int(ln.error is not None),
                 int(ln.error is not None), _dumps(ln.error)) for ln in lines)
        while part := list(itertools.islice(rows, _INSERT_SLICE)):
            conn.cursor().executemany(sql, part)

    async def get_batch(self, batch_id: str) -> BatchRecord | None:
        rows = await self._run(lambda c: self._exec(
            c, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b WHERE id = ?", (batch_id,)).fetchall())
        return _batch(rows[0]) if rows else None

    async def list_batches(self, after: str | None, limit: int, owner: str | None = None) -> list[BatchRecord]:
        """Newest first (OpenAI's order); ``after`` is the last id of the previous page; ``owner``
        a key id ("" = the anonymous owner; None = every owner's)."""
        where: list[str] = []
        args: list[Any] = []
        _owned_page(where, args, owner, after, "batches", "<")
        cond = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._run(lambda c: self._exec(
            c, f"SELECT {_BATCH_COLS}, {_COUNTS} FROM batches b {cond}ORDER BY created_at DESC, id DESC LIMIT ?",
            [*args, limit]).fetchall())
        return [_batch(r) for r in rows]

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
                    self._insert_file(conn, out[0], [out[1]])
                    ids[col] = out[0].id
            self._exec(conn, f"UPDATE batches SET status = ?, {stamp} = ?, output_file_id = ?, error_file_id = ? "
                             "WHERE id = ?",
                       (status, int(time.time()), ids.get("output_file_id"), ids.get("error_file_id"), batch_id))

        await self._run(fin)


def _owned_page(where: list[str], args: list[Any], owner: str | None, after: str | None, table: str,
                cmp: str) -> None:
    """The conditions of one page of ``owner``'s rows (None: everyone's) after row ``after`` (by
    creation time, then id; ``cmp`` is ``<`` newest first, ``>`` oldest first)."""
    if owner is not None:
        where.append("COALESCE(key_id, '') = ?")
        args.append(owner)
    if after is not None:
        where.append(f"(created_at, id) {cmp} (SELECT created_at, id FROM {table} WHERE id = ?)")
        args.append(after)


def _dumps(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _rechunk(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Rows of at most ``CHUNK_BYTES`` (a caller may hand over one large piece)."""
    for chunk in chunks:
        for start in range(0, len(chunk), CHUNK_BYTES):
            yield chunk[start:start + CHUNK_BYTES]


def _file(row: Sequence[Any]) -> FileRecord:
    fid, purpose, filename, size, created_at, key_id, tenant, expires_at = row
    return FileRecord(fid, purpose, filename, int(size), int(created_at), key_id, tenant,
                      None if expires_at is None else int(expires_at))


def _batch(row: Sequence[Any]) -> BatchRecord:
    (bid, input_file_id, endpoint, window, status, created_at, metadata, key_id, output_file_id, error_file_id,
     in_progress_at, finalizing_at, completed_at, failed_at, cancelling_at, cancelled_at, expires_at, errors,
     tenant, total, completed, failed) = row
    return BatchRecord(
        id=bid, input_file_id=input_file_id, endpoint=endpoint, completion_window=window, status=status,
        created_at=int(created_at), metadata=orjson.loads(metadata) if metadata else None, key_id=key_id,
        tenant=tenant,
        output_file_id=output_file_id, error_file_id=error_file_id, in_progress_at=in_progress_at,
        finalizing_at=finalizing_at, completed_at=completed_at, failed_at=failed_at, cancelling_at=cancelling_at,
        cancelled_at=cancelled_at, expires_at=expires_at, errors=orjson.loads(errors) if errors else None,
        total=int(total), completed=int(completed), failed=int(failed),
    )


def sqlite_batch_store(path: str | Path) -> SqlBatchStore:
    return SqlBatchStore(sqlite_connect(path), *SQLITE)


def postgres_batch_store(dsn: str) -> SqlBatchStore:
    """The shared store (several gateway replicas read the same jobs and files)."""
    return SqlBatchStore(postgres_connect(dsn), *POSTGRES)
