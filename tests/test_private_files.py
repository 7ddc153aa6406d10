"""Every SQLite file Blink writes is 0600 (with its -wal/-shm), in a 0700 folder when Blink makes it."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from blink.gateway.auth.keys import ApiKeyStore
from blink.gateway.batch.store import sqlite_batch_store
from blink.gateway.cache.stores.sqlite import SQLiteCacheStore
from blink.gateway.cost.ledger import SpendLedger
from blink.private_files import private_dir, private_sqlite_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_private(db: Path, made_dirs: list[Path]) -> None:
    assert _mode(db) == 0o600
    companions = [db.with_name(db.name + s) for s in ("-wal", "-shm")]
    assert any(c.exists() for c in companions), "the store should run in WAL mode"
    for companion in companions:
        if companion.exists():
            assert _mode(companion) == 0o600, companion
    for directory in made_dirs:
        assert _mode(directory) == 0o700, directory


@pytest.fixture(autouse=True)
def _open_umask() -> object:
    """The permissive umask a desktop session often has: modes must not depend on it."""
    old = os.umask(0o002)
    yield
    os.umask(old)


async def test_batch_store(tmp_path: Path) -> None:
    db = tmp_path / "new" / "deeper" / "batch.db"
    store = sqlite_batch_store(db)
    await store.start()
    try:
        _assert_private(db, [tmp_path / "new", tmp_path / "new" / "deeper"])
    finally:
        await store.aclose()


def test_key_store(tmp_path: Path) -> None:
    db = tmp_path / "blink" / "keys.db"
    store = ApiKeyStore(db)
    store.create("acme")
    _assert_private(db, [tmp_path / "blink"])


async def test_cache_store(tmp_path: Path) -> None:
    db = tmp_path / "cache" / "cache.db"
    store = SQLiteCacheStore(db)
    await store.start()
    try:
        _assert_private(db, [tmp_path / "cache"])
    finally:
        await store.aclose()


async def test_cost_ledger(tmp_path: Path) -> None:
    db = tmp_path / "costs" / "ledger.db"
    ledger = SpendLedger(db)
    await ledger.start()
    try:
        _assert_private(db, [tmp_path / "costs"])
    finally:
        await ledger.aclose()


def test_existing_loose_files_are_tightened_and_existing_folders_kept(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    db = folder / "old.db"
    with sqlite3.connect(db) as conn:  # written 0644 by an older Blink
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        os.chmod(db, 0o644)
        for suffix in ("-wal", "-shm"):
            companion = db.with_name(db.name + suffix)
            if companion.exists():
                os.chmod(companion, 0o644)
        assert private_sqlite_path(db) == db
        _assert_private(db, [])
    assert _mode(folder) == 0o755  # the user's folder, the user's choice


def test_private_dir_only_sets_folders_it_creates(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "b")
    assert made.is_dir() and _mode(tmp_path / "a") == 0o700 and _mode(made) == 0o700
    private_dir(made)  # idempotent
    assert _mode(made) == 0o700
