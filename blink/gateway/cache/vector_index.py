"""Nearest-neighbour search over unit vectors: numpy brute force, HNSW past a size.

Below ``hnsw_threshold`` rows an exact matrix-vector product is exact and fast (10k x 384
float32 is 15 MB to read); above it, an hnswlib graph answers in a fraction of that (RESULTS.md,
"Cache latency"). The graph is built on a background thread from a snapshot (minutes for 100k
rows) while brute force keeps answering; changes made meanwhile are
replayed when it is swapped in. Rows are identified by the caller's integer ids.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from blink.gateway.cache.hugepages import allocate_huge

# Brute force up to here: a 10k x 384 scan costs about what one int8 embedding does.
DEFAULT_HNSW_THRESHOLD = 10_000
# hnswlib graph parameters: M=16 / ef_construction=64 (hnswlib's documented range for ~100k
# vectors of this size). ef_search=32: the smallest ef that found every dev paraphrase's nearest
# neighbour on the cache_latency graph, at half ef 64's search time (benchmarks/RESULTS.md,
# "Figures behind the code's numbers", vector_index).
_HNSW_M = 16
_HNSW_EF_CONSTRUCTION = 64
_HNSW_EF_SEARCH = 32


class VectorIndex:
    def __init__(self, dim: int, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD, background: bool = True) -> None:
        self.dim = dim
        self._threshold = hnsw_threshold
        self._background = background
        self._mat = np.zeros((16, dim), dtype=np.float32)
        self._ids = np.full(16, -1, dtype=np.int64)
        self._row_of: dict[int, int] = {}
        self._free: list[int] = []
        self._n = 0  # rows used (live or freed)
        self._hnsw: Any = None
        # While a graph is being built: the changes to replay, and the finished graph.
        self._building: threading.Thread | None = None
        self._log: list[tuple[bool, int]] = []
        self._built: Any = None

    def __len__(self) -> int:
        return len(self._row_of)

    def add(self, item_id: int, vec: np.ndarray) -> None:
        if item_id in self._row_of:
            self.remove(item_id)
        # hnswlib cannot re-add a deleted label, so rows are reused only in pure brute-force mode.
        graph = self._hnsw is not None or self._building is not None
        row = self._free.pop() if self._free and not graph else self._append_row()
        self._mat[row] = vec
        self._ids[row] = item_id
        self._row_of[item_id] = row
        if self._building is not None:
            self._log.append((True, row))
        elif self._hnsw is not None:
            self._hnsw_add(self._hnsw, row)

    def remove(self, item_id: int) -> None:
        row = self._row_of.pop(item_id, None)
        if row is None:
            return
        self._mat[row] = 0.0
        self._ids[row] = -1
        if self._building is not None:
            self._log.append((False, row))
        elif self._hnsw is not None:
            self._hnsw.mark_deleted(row)
        else:
            self._free.append(row)

    def search(self, vec: np.ndarray, k: int) -> list[tuple[float, int]]:
        """(cosine, id) of the ``k`` nearest live rows, best first."""
        if not self._row_of:
            return []
        k = min(k, len(self._row_of))
        self._maybe_switch()
        if self._hnsw is not None:
            labels, dists = self._hnsw.knn_query(vec.reshape(1, -1), k=k)
            return [(1.0 - float(d), int(self._ids[r])) for r, d in zip(labels[0], dists[0], strict=True)]
        scores = self._mat[: self._n] @ vec
        scores[self._ids[: self._n] < 0] = -2.0
        top = np.argpartition(-scores, k - 1)[:k] if k < self._n else np.arange(self._n)
        top = top[np.argsort(-scores[top])]
        return [(float(scores[r]), int(self._ids[r])) for r in top if self._ids[r] >= 0][:k]

    def build_now(self, threads: int) -> None:
        """Build a due graph in the caller's thread on ``threads`` cores: at load, before anything
        is served, so no request competes with it (100k rows: minutes on one core)."""
        if self._hnsw is None and self._building is None and len(self._row_of) > self._threshold:
            self._building = threading.current_thread()
            self._build(*self._snapshot(), threads=threads)
        self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until a background build finished and is swapped in (benchmarks, tests)."""
        self._maybe_switch()
        if self._building is not None:
            self._building.join(timeout)
            self._maybe_switch()

    def _maybe_switch(self) -> None:
        if self._building is not None and self._built is not None:
            index, self._built, self._building = self._built, None, None
            for added, row in self._log:  # replay what changed while the graph was built
                if added and self._ids[row] >= 0:
                    self._hnsw_add(index, row)
                elif not added:
                    try:
                        index.mark_deleted(row)
                    except RuntimeError:
                        pass  # added and removed during the build: never in the graph
            self._log.clear()
            self._free.clear()
            self._hnsw = index
        elif self._hnsw is None and self._building is None and len(self._row_of) > self._threshold:
            vecs, labels = self._snapshot()
            if self._background:
                self._building = threading.Thread(target=self._build, args=(vecs, labels), daemon=True,
                                                  name="blink-hnsw-build")
                self._building.start()
            else:
                self._building = threading.current_thread()
                self._build(vecs, labels)
                self._maybe_switch()

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        live = np.flatnonzero(self._ids[: self._n] >= 0)
        return self._mat[live].copy(), live

    def _build(self, vecs: np.ndarray, labels: np.ndarray, threads: int = 1) -> None:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=self.dim)
        # Huge pages for the level-0 block: a search after an embedding visits cold nodes, which
        # 2 MB pages make cheaper (hugepages.py; RESULTS.md, "Figures behind the code's numbers", vector_index).
        allocate_huge(lambda: index.init_index(max_elements=max(2 * len(vecs), 1024), M=_HNSW_M,
                                               ef_construction=_HNSW_EF_CONSTRUCTION, allow_replace_deleted=True))
        index.set_ef(_HNSW_EF_SEARCH)
        index.set_num_threads(threads)
        index.add_items(vecs, labels)
        index.set_num_threads(1)  # searches and later inserts: one row each, on the caller's core
        self._built = index

    def _append_row(self) -> int:
        if self._n == len(self._mat):
            grow = len(self._mat)
            self._mat = np.concatenate([self._mat, np.zeros((grow, self.dim), dtype=np.float32)])
            self._ids = np.concatenate([self._ids, np.full(grow, -1, dtype=np.int64)])
        self._n += 1
        return self._n - 1

    def _hnsw_add(self, index: Any, row: int) -> None:
        if index.get_current_count() >= index.get_max_elements():
            allocate_huge(lambda: index.resize_index(2 * index.get_max_elements()))
        index.add_items(self._mat[row].reshape(1, -1), np.array([row]), replace_deleted=True)
