"""The behaviour every ``CacheStore`` must show; run against each store by the test modules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from blink.gateway.cache.entry import CachedChoice, CachedResponse
from blink.gateway.cache.store import CacheStore

StoreFactory = Callable[[int], Awaitable[CacheStore]]  # max_entries -> started store
DIM = 8


def entry(text: str, query: str = "") -> CachedResponse:
    return CachedResponse("chat", [CachedChoice(text, "stop")], 3, 4, query=query)


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


async def check_exact_roundtrip(store: CacheStore) -> None:
    assert await store.get_exact("ns", b"k1") is None
    await store.put("ns", b"k1", None, entry("hello"), ttl=60)
    got = await store.get_exact("ns", b"k1")
    assert got is not None and got.choices[0].text == "hello" and got.prompt_tokens == 3
    # Same key in another namespace (another tenant) is a different entry.
    assert await store.get_exact("other", b"k1") is None


async def check_replace(store: CacheStore) -> None:
    await store.put("ns", b"k", unit(1), entry("old"), ttl=60)
    await store.put("ns", b"k", unit(1), entry("new"), ttl=60)
    got = await store.get_exact("ns", b"k")
    assert got is not None and got.choices[0].text == "new"
    hits = await store.nearest("ns", unit(1), 5)
    assert [h.choices[0].text for _, h in hits] == ["new"]


async def check_nearest(store: CacheStore) -> None:
    for i in range(5):
        await store.put("ns", f"k{i}".encode(), unit(i), entry(f"a{i}", query=f"q{i}"), ttl=60)
    await store.put("elsewhere", b"kx", unit(2), entry("other tenant"), ttl=60)
    hits = await store.nearest("ns", unit(2), 3)
    assert hits[0][1].choices[0].text == "a2" and hits[0][1].query == "q2"
    assert abs(hits[0][0] - 1.0) < 1e-4
    assert len(hits) == 3 and hits[0][0] >= hits[1][0] >= hits[2][0]
    assert all(h.choices[0].text != "other tenant" for _, h in hits)
    assert await store.nearest("empty", unit(2), 3) == []


async def check_ttl(store: CacheStore) -> None:
    await store.put("ns", b"short", unit(7), entry("short"), ttl=0.05)
    await store.put("ns", b"long", None, entry("long"), ttl=60)
    await asyncio.sleep(0.1)
    assert await store.get_exact("ns", b"short") is None
    assert all(h.choices[0].text != "short" for _, h in await store.nearest("ns", unit(7), 5))
    assert await store.get_exact("ns", b"long") is not None


async def check_lru_eviction(store: CacheStore) -> None:
    """Built with max_entries=3: the least recently used entry goes first."""
    for i in range(3):
        await store.put("ns", f"k{i}".encode(), unit(i), entry(str(i)), ttl=60)
    assert await store.get_exact("ns", b"k0") is not None  # k0 is now the most recent
    await store.put("ns", b"k3", unit(3), entry("3"), ttl=60)
    assert await store.get_exact("ns", b"k1") is None
    for k in (b"k0", b"k2", b"k3"):
        assert await store.get_exact("ns", k) is not None
    assert (await store.stats()).entries == 3


async def check_clear(store: CacheStore) -> None:
    await store.put("a", b"1", unit(1), entry("x"), ttl=60)
    await store.put("b", b"2", None, entry("y"), ttl=60)
    stats = await store.stats()
    assert stats.entries == 2 and stats.namespaces == 2
    assert await store.clear() == 2
    assert await store.get_exact("a", b"1") is None and await store.nearest("a", unit(1), 1) == []


CHECKS = [check_exact_roundtrip, check_replace, check_nearest, check_ttl, check_clear]
# What an exact-only store (Redis: no vectors) must show.
EXACT_CHECKS = [check_exact_roundtrip, check_ttl, check_clear]
