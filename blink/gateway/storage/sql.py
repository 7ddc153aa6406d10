"""The SQL plumbing the gateway's durable stores share (the Batch API's jobs and files, stored responses).

One DB-API connection (SQLite by default, PostgreSQL for stores several gateway replicas share),
used from a worker thread under a lock so the event loop never waits on disk, each call one
transaction. The SQL is written with ``?`` placeholders and a ``{blob}`` column type; the dialect
(``SQLITE`` / ``POSTGRES``) says how each driver spells them. A store subclasses ``SqlStore`` and
supplies ``_schema``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from blink.private_files import private_sqlite_path
from blink.protocol.errors import StorageError


class SqlStore:
    """One DB-API connection used from a worker thread under a lock (SQLite or psycopg).

    ``connect`` opens the connection; ``param`` is the driver's placeholder (``?`` or ``%s``);
    ``blob_type`` the binary column type (``BLOB`` or ``BYTEA``).
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
                except BaseException as exc:
                    self._conn.rollback()
                    storage = _storage_error(exc)
                    if storage is not None:
                        raise storage from exc
                    raise

        return await asyncio.to_thread(locked)

    def _exec(self, conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
        return conn.execute(self._sql(sql), tuple(args))

    def _schema(self, conn: Any) -> None:
        """Create (or bring up to date) the store's tables; runs in ``start``'s transaction."""
        raise NotImplementedError

    async def start(self) -> None:
        if self._conn is not None:
            return
        self._conn = await asyncio.to_thread(self._connect)
        await self._run(self._schema)

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


def _storage_error(exc: BaseException) -> StorageError | None:
    """A full or unwritable store as the client's typed error (it was an unhandled 500 with a
    traceback); None for any other failure. SQLite names its result codes (Python >= 3.11), and
    PostgreSQL's SQLSTATE 53100 is disk_full."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if name.startswith("SQLITE_FULL") or getattr(exc, "sqlstate", None) == "53100":
        return StorageError("The server's storage is full: nothing of this request was saved. "
                            "Retry once space is freed (delete files you no longer need).",
                            status=507, code="insufficient_storage")
    if name.startswith(("SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN")):
        return StorageError("The server's storage cannot be written: nothing of this request was saved.")
    return None


def sqlite_connect(path: str | Path) -> Callable[[], sqlite3.Connection]:
    """SQLite in WAL mode: a committed row survives a kill -9 of the server (not only a clean exit)."""
    target = Path(path).expanduser()

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(str(private_sqlite_path(target)), check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: WAL commits survive a process crash; only an OS crash could lose the last ones.
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return connect


def postgres_connect(dsn: str) -> Callable[[], Any]:
    """The shared store: every gateway replica reads and writes the same rows."""

    def connect() -> Any:
        import psycopg

        return psycopg.connect(dsn)

    return connect


# (placeholder, binary column type) per dialect.
SQLITE = ("?", "BLOB")
POSTGRES = ("%s", "BYTEA")
