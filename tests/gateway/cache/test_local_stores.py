"""The store contract against the in-process store and the SQLite-backed store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from store_contract import CHECKS, check_lru_eviction, entry, unit

from blink.gateway.cache.store import CacheStore
from blink.gateway.cache.stores.memory import MemoryCacheStore
from blink.gateway.cache.stores.sqlite import SQLiteCacheStore


async def _make(kind: str, tmp_path: Path, max_entries: int = 1000) -> CacheStore:
    store: CacheStore = MemoryCacheStore(max_entries) if kind == "memory" else SQLiteCacheStore(tmp_path / "c.db", max_entries)
    await store.start()
    return store


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_contract(kind: str, check, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = await _make(kind, tmp_path)
    try:
        await check(store)
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_lru_eviction(kind: str, tmp_path: Path) -> None:
    store = await _make(kind, tmp_path, max_entries=3)
    try:
        await check_lru_eviction(store)
    finally:
        await store.aclose()


async def test_sqlite_reload_keeps_entries_vectors_and_evictions(tmp_path: Path) -> None:
    store = SQLiteCacheStore(tmp_path / "c.db", max_entries=3)
    for i in range(4):
        await store.put("ns", f"k{i}".encode(), unit(i), entry(str(i), query=f"q{i}"), ttl=60)
    await store.aclose()
    reopened = SQLiteCacheStore(tmp_path / "c.db", max_entries=3)
    await reopened.start()
    assert await reopened.get_exact("ns", b"k0") is None  # evicted before the restart
    hits = await reopened.nearest("ns", unit(3), 1)
    assert hits[0][1].query == "q3"
    assert (await reopened.stats()).entries == 3
    await reopened.aclose()
    with sqlite3.connect(tmp_path / "c.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT count(*) FROM cache_entries").fetchone()[0] == 3


def test_vector_index_switches_to_hnsw_and_keeps_answering() -> None:
    import numpy as np

    from blink.gateway.cache.vector_index import VectorIndex

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = VectorIndex(16, hnsw_threshold=100)
    for i, v in enumerate(vecs[:300]):
        index.add(i, v)
    assert index.search(vecs[42], 1)[0][1] == 42  # brute force while the graph builds
    index.remove(7)
    for i, v in enumerate(vecs[300:], start=300):  # changes made during the build are replayed
        index.add(i, v)
    index.wait_ready(timeout=30)
    assert index._hnsw is not None
    index.remove(5)
    index.add(1000, vecs[5])
    assert index.search(vecs[42], 1)[0][1] == 42
    assert index.search(vecs[350], 1)[0][1] == 350
    assert index.search(vecs[5], 1)[0][1] == 1000
    assert all(i != 7 for _, i in index.search(vecs[7], 5))
    assert len(index) == 399


def test_vector_index_build_now_builds_the_graph_in_the_caller_and_keeps_inserting() -> None:
    """The load-time build (several cores, in the caller's thread): the graph answers at once and
    later inserts still go into it."""
    import numpy as np

    from blink.gateway.cache.vector_index import VectorIndex

    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((301, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = VectorIndex(16, hnsw_threshold=100)
    for i, v in enumerate(vecs[:300]):
        index.add(i, v)
    index.build_now(threads=2)
    assert index._hnsw is not None and index._building is None
    assert index._hnsw.get_current_count() == 300
    index.add(300, vecs[300])
    assert index._hnsw.get_current_count() == 301
    assert [i for _, i in index.search(vecs[300], 1)] == [300]
    assert [i for _, i in index.search(vecs[17], 1)] == [17]
