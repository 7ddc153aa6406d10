"""The batch store contract on SQLite (default) and on a real PostgreSQL server."""

from __future__ import annotations

import io
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from servers import PostgresServer

from blink.gateway.batch.jsonl import parse_lines
from blink.gateway.batch.store import (
    CHUNK_BYTES,
    BatchRecord,
    FileRecord,
    NewLine,
    SqlBatchStore,
    StorageQuotaExceeded,
    postgres_batch_store,
    sqlite_batch_store,
)
from blink.protocol.errors import InvalidRequestError


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlBatchStore]:
    if request.param == "sqlite":
        s = sqlite_batch_store(tmp_path / "b.db")
    else:
        s = postgres_batch_store(request.getfixturevalue("postgres").dsn)
    await s.start()
    yield s
    await s.aclose()


def _batch(created_at: int) -> BatchRecord:
    return BatchRecord(id=f"batch_{uuid.uuid4().hex}", input_file_id="file-x", endpoint="/v1/chat/completions",
                       completion_window="24h", status="validating", created_at=created_at, metadata={"a": "b"})


async def test_line_completes_exactly_once_and_finalizes(store: SqlBatchStore) -> None:
    await store.put_file(FileRecord("file-x", "batch", "in.jsonl", 3, 1), io.BytesIO(b"abc"))
    assert await store.file_content("file-x") == b"abc"
    rec = _batch(10)
    lines = [NewLine(0, "a", body={"x": 1}), NewLine(1, None, error={"error": {"code": "invalid_json"}}),
             NewLine(2, "c", body={"x": 3})]
    await store.create_batch(rec, lines)
    got = await store.get_batch(rec.id)
    assert got is not None and (got.total, got.completed, got.failed) == (3, 0, 1) and got.metadata == {"a": "b"}
    assert [p.index for p in await store.pending_lines(rec.id, 10, -1)] == [0, 2]
    assert [p.index for p in await store.pending_lines(rec.id, 10, 0)] == [2]
    assert await store.complete_line(rec.id, 0, {"custom_id": "a", "n": 1}, is_error=False)
    assert not await store.complete_line(rec.id, 0, {"custom_id": "a", "n": 2}, is_error=False)  # exactly once
    assert await store.complete_line(rec.id, 2, {"custom_id": "c"}, is_error=True)
    assert [orjson.loads(x) for x in await store.finished_lines(rec.id, False)] == [{"custom_id": "a", "n": 1}]
    assert len(await store.finished_lines(rec.id, True)) == 2
    assert [b.id for b in await store.active_batches()] == [rec.id]
    assert await store.set_status(rec.id, "in_progress", "in_progress_at", only_from=("validating",))
    assert not await store.set_status(rec.id, "in_progress", "in_progress_at", only_from=("validating",))
    out = FileRecord("file-out", "batch_output", "o.jsonl", 2, 11)
    await store.finalize(rec.id, "completed", "completed_at", {"output_file_id": (out, b"{}"), "error_file_id": None})
    final = await store.get_batch(rec.id)
    assert final is not None and final.status == "completed" and final.output_file_id == "file-out"
    assert final.error_file_id is None and final.completed_at is not None
    assert await store.active_batches() == []
    assert await store.get_batch("batch_missing") is None and await store.get_file("file-missing") is None


async def test_list_is_newest_first_with_cursor(store: SqlBatchStore) -> None:
    ids = []
    for t in range(3):
        rec = _batch(1000 + t)
        await store.create_batch(rec, [NewLine(0, "a", body={})])
        ids.append(rec.id)
    page = await store.list_batches(None, 100)
    mine = [b.id for b in page if b.id in ids]
    assert mine == ids[::-1]
    after = await store.list_batches(ids[2], 100)
    assert [b.id for b in after if b.id in ids] == [ids[1], ids[0]]


def _file(owner: str | None, tenant: str | None, size: int = 3, expires_at: int | None = None,
          created_at: int = 1) -> FileRecord:
    return FileRecord(f"file-{uuid.uuid4().hex}", "batch", "in.jsonl", size, created_at, owner, tenant, expires_at)


async def test_large_file_round_trips_in_chunks(store: SqlBatchStore) -> None:
    line = b'{"custom_id": "%d", "body": {}}\n'
    content = b"".join(line % i for i in range(120_000))  # a few chunks, lines across chunk edges
    assert len(content) > 2 * CHUNK_BYTES
    rec = _file("k1", "t1", len(content))
    await store.put_file(rec, io.BytesIO(content))
    chunks = [c async for c in store.file_chunks(rec.id)]
    assert len(chunks) == -(-len(content) // CHUNK_BYTES) and b"".join(chunks) == content
    batch = BatchRecord(id=f"batch_{uuid.uuid4().hex}", input_file_id=rec.id, endpoint="/v1/chat/completions",
                        completion_window="24h", status="validating", created_at=5, key_id="k1", tenant="t1")
    await store.create_batch_from_file(batch, lambda chunks: parse_lines(chunks, "/v1/chat/completions"))
    got = await store.get_batch(batch.id)
    assert got is not None and (got.total, got.failed) == (120_000, 0)
    last = await store.pending_lines(batch.id, 10, 119_998)
    assert [(p.index, p.custom_id) for p in last] == [(119_999, "119999")]
    assert (got.key_id, got.tenant) == ("k1", "t1")


async def test_line_limit_while_parsing_creates_nothing(store: SqlBatchStore) -> None:
    rec = _file(None, None, 9)
    await store.put_file(rec, io.BytesIO(b"{}\n{}\n{}\n"))
    batch = _batch(7)
    batch.input_file_id = rec.id
    with pytest.raises(InvalidRequestError) as exc:
        await store.create_batch_from_file(batch, lambda c: parse_lines(c, "/v1/chat/completions", max_lines=2))
    assert exc.value.code == "too_many_requests"
    assert await store.get_batch(batch.id) is None


async def test_owner_filter_quota_delete_and_expiry(store: SqlBatchStore) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    a, b = f"ka-{uuid.uuid4().hex}", f"kb-{uuid.uuid4().hex}"
    fa = _file(a, tenant, 40, created_at=10)
    fb = _file(b, tenant, 50, created_at=11)
    await store.put_file(fa, io.BytesIO(b"x" * 40), quota_bytes=100)
    await store.put_file(fb, io.BytesIO(b"y" * 50), quota_bytes=100)
    assert await store.tenant_usage(tenant) == 90
    with pytest.raises(StorageQuotaExceeded) as exc:  # the tenant's total, whichever key uploads
        await store.put_file(_file(a, tenant, 11), io.BytesIO(b"z" * 11), quota_bytes=100)
    assert (exc.value.used, exc.value.quota) == (90, 100)
    assert [f.id for f in await store.list_files(a, None, None, 100, True)] == [fa.id]
    everyone = [f.id for f in await store.list_files(None, "batch", None, 10_000, True)]
    assert everyone.index(fb.id) < everyone.index(fa.id)  # newest first
    assert [f.id for f in await store.list_files(b, None, None, 100, False)] == [fb.id]
    assert await store.delete_file(fa.id) and not await store.delete_file(fa.id)
    assert await store.get_file(fa.id) is None and await store.file_content(fa.id) is None
    assert await store.tenant_usage(tenant) == 50
    now = int(time.time())
    gone = _file(a, tenant, 3, expires_at=now - 1)
    await store.put_file(gone, io.BytesIO(b"abc"))
    assert await store.get_file(gone.id) is None  # expired: hidden before the sweep
    assert await store.tenant_usage(tenant) == 53
    assert await store.delete_expired_files(now) >= 1
    assert await store.tenant_usage(tenant) == 50
    assert [c async for c in store.file_chunks(gone.id)] == []


async def test_list_batches_filtered_by_owner(store: SqlBatchStore) -> None:
    mine, theirs = _batch(2000), _batch(2001)
    mine.key_id, theirs.key_id = f"k-{uuid.uuid4().hex}", f"k-{uuid.uuid4().hex}"
    for rec in (mine, theirs):
        await store.create_batch(rec, [NewLine(0, "a", body={})])
    assert [b.id for b in await store.list_batches(None, 100, mine.key_id)] == [mine.id]
    assert {mine.id, theirs.id} <= {b.id for b in await store.list_batches(None, 1000)}


async def test_store_written_by_an_older_blink_gains_owner_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE batch_files (id TEXT PRIMARY KEY, purpose TEXT NOT NULL, filename TEXT NOT NULL, "
                     "bytes BIGINT NOT NULL, created_at BIGINT NOT NULL, content BLOB NOT NULL)")
        conn.execute("INSERT INTO batch_files VALUES ('file-old', 'batch', 'a.jsonl', 3, 1, X'616263')")
    store = sqlite_batch_store(db)
    await store.start()
    try:
        old = await store.get_file("file-old")
        assert old is not None and old.key_id is None and old.expires_at is None
        assert await store.file_content("file-old") == b"abc"  # stored whole, read back as one chunk
    finally:
        await store.aclose()
