"""SqlStore on a full disk: the caller gets a typed error and nothing is half-written."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from blink.gateway.batch.store import FileRecord, SqlBatchStore
from blink.gateway.storage.sql import SQLITE, sqlite_connect
from blink.protocol.errors import StorageError


def _capped(path: Path, pages: int) -> Callable[[], sqlite3.Connection]:
    """A real SQLite file that cannot grow past ``pages`` pages: SQLite's own "database or disk is
    full" (SQLITE_FULL), what a full disk gives, without filling one."""
    connect = sqlite_connect(path)

    def capped() -> sqlite3.Connection:
        conn = connect()
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    return capped


async def test_a_full_store_is_a_507_and_keeps_nothing_of_the_write(tmp_path: Path) -> None:
    store = SqlBatchStore(_capped(tmp_path / "b.db", 40), *SQLITE)
    await store.start()
    try:
        big = b"x" * 400_000  # ~100 pages of 4 KiB: past the cap
        with pytest.raises(StorageError) as info:  # was sqlite3.OperationalError: an unhandled 500
            await store.put_file(FileRecord("file-big", "batch", "big.jsonl", len(big), 1), io.BytesIO(big))
        assert (info.value.status, info.value.code) == (507, "insufficient_storage")
        assert await store.get_file("file-big") is None  # the transaction rolled back whole
        await store.put_file(FileRecord("file-small", "batch", "s.jsonl", 3, 2), io.BytesIO(b"abc"))
        assert await store.file_content("file-small") == b"abc"  # the store still works
    finally:
        await store.aclose()
