"""The stored-responses store on SQLite and on a real PostgreSQL: chains, TTL, the tenant budget."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from servers import PostgresServer

from blink.gateway.responses.store import (
    SqlResponseStore,
    StoredResponse,
    postgres_response_store,
    sqlite_response_store,
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlResponseStore]:
    s = (sqlite_response_store(tmp_path / "r.db") if request.param == "sqlite"
         else postgres_response_store(request.getfixturevalue("postgres").dsn))
    await s.start()
    yield s
    await s.aclose()


def _rec(tenant: str, previous: str | None = None, expires_at: int | None = None, pad: int = 0) -> StoredResponse:
    rid = f"resp_{uuid.uuid4().hex}"
    return StoredResponse(rid, "key-1", tenant, [{"id": "msg_1", "type": "message", "text": "x" * pad}],
                          {"id": rid, "output": []}, previous, expires_at)


async def test_a_chain_is_walked_back_to_its_first_turn(store: SqlResponseStore) -> None:
    tenant = uuid.uuid4().hex
    one = _rec(tenant)
    two = _rec(tenant, one.id)
    three = _rec(tenant, two.id)
    for rec in (one, two, three):
        assert await store.put(rec, None)
    chain = await store.chain(three.id, 10)
    assert chain is not None and [r.id for r in chain] == [one.id, two.id, three.id]
    assert await store.chain(three.id, 2) is None  # longer than allowed
    assert await store.delete(two.id) and not await store.delete(two.id)
    assert await store.chain(three.id, 10) is None  # a missing link breaks the conversation
    got = await store.get(one.id)
    assert got is not None and got.tenant == tenant and got.key_id == "key-1" and got.response["id"] == one.id


async def test_an_expired_response_is_gone_at_once_and_swept_on_write(store: SqlResponseStore) -> None:
    tenant = uuid.uuid4().hex
    old = _rec(tenant, expires_at=int(time.time()) - 1)
    assert await store.put(old, None)
    assert await store.get(old.id) is None
    assert await store.put(_rec(tenant), None)  # any write sweeps the expired rows
    before = await store.tenant_bytes(tenant)
    assert before > 0 and await store.get(old.id) is None


async def test_the_budget_evicts_the_tenants_oldest_only(store: SqlResponseStore) -> None:
    tenant, neighbour = uuid.uuid4().hex, uuid.uuid4().hex
    theirs = _rec(neighbour, pad=500)
    await store.put(theirs, None)
    recs = [_rec(tenant, pad=500) for _ in range(5)]
    budget = 3 * 600
    for rec in recs:
        assert await store.put(rec, budget)
    assert await store.tenant_bytes(tenant) <= budget
    present = [r.id for r in recs if await store.get(r.id) is not None]
    assert present == [r.id for r in recs][-len(present):] and 0 < len(present) < 5
    assert await store.get(theirs.id) is not None  # another tenant's rows are never evicted
    assert not await store.put(_rec(tenant, pad=budget), budget)  # alone over budget: refused, nothing evicted
    assert [r.id for r in recs if await store.get(r.id) is not None] == present
