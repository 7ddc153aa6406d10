"""The write-behind response store on a real SQLite file: reads never miss a queued write, the queue
reaches the database in batches, a graceful stop writes it all, and a failed batch is never silent."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from blink.config.responses import ResponsesSettings
from blink.gateway.responses.store import SqlResponseStore, StoredResponse, sqlite_response_store
from blink.gateway.responses.write_behind import WriteBehindResponseStore

# Long enough that nothing is flushed behind a test's back unless it asks.
_NEVER_S = 3600.0


def _rec(tenant: str = "t", previous: str | None = None, expires_at: int | None = None, pad: int = 0,
         rid: str | None = None) -> StoredResponse:
    rid = rid or f"resp_{uuid.uuid4().hex}"
    return StoredResponse(rid, "key-1", tenant, [{"id": "msg_1", "type": "message", "text": "x" * pad}],
                          {"id": rid, "output": [{"type": "message", "text": "hi"}]}, previous, expires_at)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqlResponseStore]:
    s = sqlite_response_store(tmp_path / "r.db")
    await s.start()
    yield s
    await s.aclose()


@pytest.fixture
async def store(db: SqlResponseStore) -> AsyncIterator[WriteBehindResponseStore]:
    s = WriteBehindResponseStore(db, _NEVER_S)
    await s.start()
    yield s
    await s.aclose()


async def test_a_queued_response_is_read_at_once_and_written_by_the_flush(
        store: WriteBehindResponseStore, db: SqlResponseStore) -> None:
    one = _rec()
    two = _rec(previous=one.id)
    assert await store.put(one, None)
    await store.flush()  # one in the database, two only queued: a chain spans both
    assert await store.put(two, None)
    assert await db.get(two.id) is None
    got = await store.get(two.id)
    assert got is not None and got.response == two.response and got.input_items == two.input_items
    got.response["id"] = "changed"  # a reader's copy is its own
    assert (await store.get(two.id)).response["id"] == two.id  # type: ignore[union-attr]
    chain = await store.chain(two.id, 10)
    assert chain is not None and [r.id for r in chain] == [one.id, two.id]
    assert await store.chain(two.id, 1) is None  # the depth bound counts queued turns too
    await store.flush()
    assert (await db.get(two.id)) is not None


async def test_deleting_a_queued_response_keeps_it_out_of_the_database(
        store: WriteBehindResponseStore, db: SqlResponseStore) -> None:
    rec = _rec()
    await store.put(rec, None)
    assert await store.delete(rec.id) and not await store.delete(rec.id)
    assert await store.get(rec.id) is None
    await store.flush()
    assert await db.get(rec.id) is None


async def test_an_expired_queued_response_is_gone_for_readers(store: WriteBehindResponseStore) -> None:
    old = _rec(expires_at=int(time.time()) - 1)
    await store.put(old, None)
    assert await store.get(old.id) is None
    assert await store.chain(old.id, 10) is None


async def test_the_budget_holds_once_a_batch_is_written(store: WriteBehindResponseStore) -> None:
    recs = [_rec("budgeted", pad=500) for _ in range(5)]
    budget = 3 * 600
    for rec in recs:
        assert await store.put(rec, budget)
    assert not await store.put(_rec("budgeted", pad=budget), budget)  # alone over budget: refused at once
    assert await store.tenant_bytes("budgeted") <= budget  # (flushes first)
    present = [r.id for r in recs if await store.get(r.id) is not None]
    assert present == [r.id for r in recs][-len(present):] and 0 < len(present) < 5  # the oldest went


async def test_the_background_flush_and_a_graceful_stop_write_the_queue(tmp_path: Path) -> None:
    db = sqlite_response_store(tmp_path / "r.db")
    s = WriteBehindResponseStore(db, 0.01)
    await s.start()
    first = _rec()
    await s.put(first, None)
    for _ in range(200):  # the loop writes it within its interval (bounded wait)
        await asyncio.sleep(0.01)
        if await db.get(first.id) is not None:
            break
    assert await db.get(first.id) is not None
    last = _rec()
    await s.put(last, None)
    await s.aclose()  # stops the loop, writes what is queued
    reopened = sqlite_response_store(tmp_path / "r.db")
    await reopened.start()
    try:
        assert await reopened.get(last.id) is not None
    finally:
        await reopened.aclose()


async def test_group_commit_mode_returns_after_the_commit_and_fails_loudly(db: SqlResponseStore) -> None:
    s = WriteBehindResponseStore(db, None)
    await s.start()
    try:
        recs = [_rec() for _ in range(8)]
        assert all(await asyncio.gather(*(s.put(r, None) for r in recs)))  # concurrent: shared batches
        assert all([await db.get(r.id) is not None for r in recs])
        with pytest.raises(Exception, match="UNIQUE"):  # a batch that cannot be written: the reply fails
            await s.put(_rec(rid=recs[0].id), None)
        cancelled = asyncio.create_task(s.put(_rec(), None))
        await asyncio.sleep(0)
        cancelled.cancel()  # a caller gone mid-commit does not cut the batch short
        await asyncio.gather(cancelled, return_exceptions=True)
        after = _rec()
        assert await s.put(after, None) and await db.get(after.id) is not None
    finally:
        await s.aclose()


async def test_a_failed_background_batch_is_logged(store: WriteBehindResponseStore, db: SqlResponseStore,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    taken = _rec()
    await db.put(taken, None)
    await store.put(_rec(rid=taken.id), None)
    with caplog.at_level(logging.ERROR, logger="blink.gateway"):
        await store.flush()
    assert "lost 1 stored responses" in caplog.text
    assert await store.get(taken.id) is not None  # the written one is untouched


def test_postgres_defaults_to_waiting_for_the_commit() -> None:
    assert ResponsesSettings().flush_interval_s() == 0.05
    assert ResponsesSettings(store="postgres").flush_interval_s() is None  # a shared store: replicas must see it
    assert ResponsesSettings(store="postgres", write_behind_s=0.2).flush_interval_s() == 0.2
