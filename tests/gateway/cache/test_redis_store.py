"""The store contract against Redis (exact only) and Redis + PostgreSQL (tiered), real servers;
and the fail-soft wrapper against a Redis that is stopped by PID mid-test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from servers import PostgresServer, RedisServer, free_port
from store_contract import CHECKS, DIM, EXACT_CHECKS, check_lru_eviction, entry, unit

from blink.gateway.cache.store import CacheStore
from blink.gateway.cache.stores.fail_soft import FailSoftStore
from blink.gateway.cache.stores.postgres import PostgresCacheStore
from blink.gateway.cache.stores.redis import RedisCacheStore
from blink.gateway.cache.stores.tiered import TieredCacheStore
from blink.gateway.storage.errors import StoreErrorRelay


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


async def _redis(url: str, max_entries: int = 1000) -> RedisCacheStore:
    # 1 s timeout: the contract is about behaviour, and this machine is shared.
    store = RedisCacheStore(url, max_entries=max_entries, timeout_s=1.0)
    await store.start()
    await store.clear()
    return store


@pytest.fixture
async def tiered(redis_server: RedisServer, postgres: PostgresServer) -> AsyncIterator[CacheStore]:
    vectors = PostgresCacheStore(postgres.dsn, max_entries=1000, dim=DIM)
    store = TieredCacheStore(await _redis(redis_server.url), vectors)
    await store.start()
    await vectors.clear()
    yield store
    await store.aclose()


@pytest.mark.parametrize("check", EXACT_CHECKS, ids=lambda c: c.__name__)
async def test_redis_contract(check, redis_server: RedisServer) -> None:  # type: ignore[no-untyped-def]
    store = await _redis(redis_server.url)
    try:
        await check(store)
        assert await store.nearest("ns", unit(1), 3) == []  # vectors live in PostgreSQL
    finally:
        await store.aclose()


async def test_redis_lru_eviction(redis_server: RedisServer) -> None:
    store = await _redis(redis_server.url, max_entries=3)
    try:
        await check_lru_eviction(store)
    finally:
        await store.aclose()


async def test_redis_ttl_is_set_on_the_key(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    store = await _redis(redis_server.url)
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await store.put("ns", b"k", None, entry("x"), ttl=30)
        ttl_ms = await client.pttl(store._key("ns", b"k"))
        assert 29_000 < ttl_ms <= 30_000
    finally:
        await client.aclose()
        await store.aclose()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_tiered_contract(check, tiered: CacheStore) -> None:  # type: ignore[no-untyped-def]
    await check(tiered)


async def test_two_gateways_share_redis_entries(redis_server: RedisServer) -> None:
    a, b = await _redis(redis_server.url), RedisCacheStore(redis_server.url, timeout_s=1.0)
    try:
        await a.put("ns", b"shared", None, entry("from gateway a"), ttl=60)
        got = await b.get_exact("ns", b"shared")
        assert got is not None and got.choices[0].text == "from gateway a"
    finally:
        await a.aclose()
        await b.aclose()


async def test_fail_soft_skips_a_stopped_redis_within_its_timeout() -> None:
    relay = StoreErrorRelay()
    with RedisServer() as server:
        store = FailSoftStore(RedisCacheStore(server.url, timeout_s=0.05), "redis", relay, timeout_s=0.05,
                              backoff_s=0.2)
        await store.start()
        await store.put("ns", b"k", None, entry("live"), ttl=60)
        assert (await store.get_exact("ns", b"k")) is not None
    # The server is gone (stopped by PID): lookups miss quickly instead of failing or hanging.
    t0 = time.monotonic()
    assert await store.get_exact("ns", b"k") is None
    assert await store.nearest("ns", unit(1), 3) == []
    await store.put("ns", b"k2", None, entry("lost"), ttl=60)  # skipped, never raises
    assert time.monotonic() - t0 < 0.5
    assert relay.counts[("redis", "get")] == 1  # then the store sits out its backoff
    await asyncio.sleep(0.25)
    assert await store.get_exact("ns", b"k") is None
    assert relay.counts[("redis", "get")] == 2
    await store.aclose()


async def test_fail_soft_bounds_a_store_that_never_answers() -> None:
    """A port that accepts connections and never replies (a black-holed Redis)."""
    port = free_port()
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
    relay = StoreErrorRelay()
    store = FailSoftStore(RedisCacheStore(f"redis://127.0.0.1:{port}", timeout_s=5.0), "redis", relay,
                          timeout_s=0.05)
    try:
        t0 = time.monotonic()
        assert await store.get_exact("ns", b"k") is None
        assert time.monotonic() - t0 < 0.5
        assert relay.counts[("redis", "get")] == 1
    finally:
        server.close()
        await store.aclose()
