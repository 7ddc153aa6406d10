"""The batch store contract on SQLite (default) and on a real PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
from servers import PostgresServer

from blink.gateway.batch.store import (
    BatchRecord,
    FileRecord,
    NewLine,
    SqlBatchStore,
    postgres_batch_store,
    sqlite_batch_store,
)


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
    await store.put_file(FileRecord("file-x", "batch", "in.jsonl", 3, 1), b"abc")
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
