"""Dynamic batching: each caller gets its own rows in order, batches form, failures stay in their batch."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from blink.modelserver.batcher import BatchConfig, DynamicBatcher
from blink.protocol.errors import BackendTimeoutError, InternalServerError, OverloadedError


class Squarer:
    """A real batch function: squares each input, records batch sizes, fails on a poisoned batch."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.delay_s = delay_s

    def __call__(self, xs: list[int]) -> list[np.ndarray]:
        self.batches.append(list(xs))
        if self.delay_s:
            time.sleep(self.delay_s)
        if any(x < 0 for x in xs):
            raise ValueError("negative input poisons its batch")
        return [np.asarray([x, x * x]) for x in xs]


async def test_each_caller_gets_its_own_rows_in_order() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=64, window_s=0.02, adaptive_window=False))
    try:
        inputs = [list(range(i * 10, i * 10 + 1 + i % 4)) for i in range(16)]
        outs = await asyncio.gather(*(b.run(xs) for xs in inputs))
        for xs, rows in zip(inputs, outs, strict=True):
            assert [int(r[0]) for r in rows] == xs and [int(r[1]) for r in rows] == [x * x for x in xs]
        # 16 callers within one 20 ms window: far fewer model calls than callers.
        assert len(fn.batches) < 16 and b.stats.items == sum(len(x) for x in inputs)
    finally:
        b.close()


async def test_max_batch_size_bounds_every_batch() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=4, window_s=0.01))
    try:
        out = await b.run(list(range(10)))
        assert [int(r[0]) for r in out] == list(range(10))
        assert max(len(x) for x in fn.batches) <= 4
    finally:
        b.close()


async def test_batching_off_runs_one_input_per_call() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=1, window_s=0.0))
    try:
        await asyncio.gather(*(b.run([i]) for i in range(8)))
        assert all(len(x) == 1 for x in fn.batches) and len(fn.batches) == 8
    finally:
        b.close()


async def test_a_failing_batch_fails_only_its_members() -> None:
    fn = Squarer(delay_s=0.05)
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=8, window_s=0.01, adaptive_window=False))
    try:
        first = asyncio.ensure_future(b.run([1, 2]))  # batch A: clean
        await asyncio.sleep(0.03)  # A is computing; the next three queue together as batch B
        bad = [asyncio.ensure_future(b.run(xs)) for xs in ([3], [-1], [4])]
        results = await asyncio.gather(first, *bad, return_exceptions=True)
        assert [int(r[0]) for r in results[0]] == [1, 2]
        assert all(isinstance(r, InternalServerError) for r in results[1:]), results
        assert [sorted(x) for x in fn.batches] == [[1, 2], [-1, 3, 4]]
        # The worker goes on: the next batch is served normally.
        assert [int(r[1]) for r in await b.run([5])] == [25]
        assert b.stats.failed_batches == 1 and b.stats.failed_items == 3
    finally:
        b.close()


def test_sync_callers_on_threads_share_batches() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=32, window_s=0.05, adaptive_window=False))
    results: dict[int, list[int]] = {}
    start = threading.Barrier(6)

    def call(i: int) -> None:
        start.wait()
        results[i] = [int(r[1]) for r in b.run_sync([i, i + 100])]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert results == {i: [i * i, (i + 100) ** 2] for i in range(6)}
        assert len(fn.batches) < 6
    finally:
        b.close()


async def test_queue_wait_beyond_timeout_fails_with_504_and_full_queue_with_503() -> None:
    fn = Squarer(delay_s=0.15)
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=1, window_s=0.0, timeout_s=0.05, max_queue=3))
    try:
        busy = asyncio.ensure_future(b.run([1]))
        await asyncio.sleep(0.02)
        late = asyncio.ensure_future(b.run([2]))  # waits 0.13 s behind the first: past its 0.05 s timeout
        with pytest.raises(OverloadedError):
            b.submit([3, 4, 5, 6])
        assert [int(r[0]) for r in await busy] == [1]
        with pytest.raises(BackendTimeoutError):
            await late
        assert b.stats.timed_out == 1 and b.stats.rejected == 4
    finally:
        b.close()


async def test_adaptive_window_skips_the_wait_for_a_lone_caller() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=8, window_s=0.5))
    try:
        t0 = time.perf_counter()
        for i in range(3):  # one caller at a time: never waits the 0.5 s window
            await b.run([i])
        assert time.perf_counter() - t0 < 0.4 and fn.batches == [[0], [1], [2]]
    finally:
        b.close()


async def test_a_hung_model_call_fails_its_callers_with_504(monkeypatch: pytest.MonkeyPatch) -> None:
    import blink.modelserver.batcher as batcher

    monkeypatch.setattr(batcher, "_HUNG_S", 0.05)  # the 5 s production grace, shortened for the test
    fn = Squarer(delay_s=0.5)
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=1, window_s=0.0, timeout_s=0.05))
    try:
        t0 = time.perf_counter()
        with pytest.raises(BackendTimeoutError):
            await b.run([1])
        assert time.perf_counter() - t0 < 0.45  # answered before the model call finished
        with pytest.raises(BackendTimeoutError):
            await asyncio.to_thread(b.run_sync, [2])  # thread callers get the same 504
    finally:
        b.close()


async def test_an_idle_batcher_runs_what_is_already_queued_as_one_batch() -> None:
    fn = Squarer()
    b = DynamicBatcher("sq", fn, BatchConfig(max_batch_size=8, window_s=0.5))
    try:
        t0 = time.perf_counter()
        out = await b.run([1, 2, 3])  # idle: no window, but the request's three inputs are all queued
        assert [int(r[1]) for r in out] == [1, 4, 9] and fn.batches == [[1, 2, 3]]
        assert time.perf_counter() - t0 < 0.4
    finally:
        b.close()
