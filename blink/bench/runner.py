"""Run a benchmark: schedule requests (closed or open loop) against one or two endpoints at once.

With two endpoints (``--compare``) both run in the same time window on the same machine: in a
closed loop each gets its own users, in an open loop every arrival is sent to both with the
same prompt, so the ratio between them is not skewed by whatever else the machine was doing.
Every run is bounded: at most ``num_requests`` per endpoint and ``max_duration_s`` of wall time
(requests still running then are cancelled and reported as unfinished).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from blink.bench.arrivals import LoadShape, arrival_offsets
from blink.bench.client import Endpoint, RequestResult, stream_one
from blink.bench.stats import summarize
from blink.bench.workloads import Workload


@dataclass
class BenchRun:
    endpoints: list[Endpoint]
    workload: str
    shape: LoadShape
    results: list[list[RequestResult]] = field(default_factory=list)
    unfinished: list[int] = field(default_factory=list)
    duration_s: float = 0.0

    def active_s(self, e: int) -> float:
        """Endpoint ``e``'s own busy span (first start to last end): its throughput's denominator,
        so two endpoints sharing a run each get their own rate."""
        done = [r for r in self.results[e] if r.e2e is not None]
        if not done or self.unfinished[e]:
            return self.duration_s
        return max(r.start + (r.e2e or 0.0) for r in done) - min(r.start for r in self.results[e])

    def summary(self, slo: dict[str, float]) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "load": self.shape.describe(),
            "endpoints": [
                {"base_url": ep.base_url, "model": ep.model,
                 **summarize(self.results[i], self.active_s(i), slo, self.unfinished[i])}
                for i, ep in enumerate(self.endpoints)
            ],
        }


async def run_bench(
    endpoints: list[Endpoint],
    workload: Workload,
    shape: LoadShape,
    num_requests: int,
    max_duration_s: float,
    *,
    seed: int = 0,
    request_timeout_s: float = 300.0,
    on_done: Callable[[RequestResult], None] | None = None,
    warmup: int = 0,
) -> BenchRun:
    """``warmup`` requests per endpoint run first, in parallel (opening connections), and are not counted."""
    run = BenchRun(endpoints, workload.name, shape, [[] for _ in endpoints], [0] * len(endpoints))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    in_flight: set[asyncio.Task[RequestResult]] = set()

    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        if warmup > 0:
            now = time.perf_counter()
            try:
                async with asyncio.timeout(max_duration_s):
                    await asyncio.gather(*(
                        stream_one(client, ep, workload.request(i), RequestResult(endpoint=e, index=-1, start=0.0), now)
                        for e, ep in enumerate(endpoints) for i in range(warmup)))
            except TimeoutError:
                pass  # the measured run below still gets its own time limit
        start = time.perf_counter()

        async def one(e: int, i: int) -> RequestResult:
            req = workload.request(i)
            res = RequestResult(endpoint=e, index=i, start=0.0, tag=req.tag)
            await stream_one(client, endpoints[e], req, res, start)
            run.results[e].append(res)
            if on_done is not None:
                on_done(res)
            return res

        def launch(e: int, i: int) -> asyncio.Task[RequestResult]:
            task = asyncio.ensure_future(one(e, i))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            return task

        async def closed_loop(e: int, users: int) -> None:
            counter = iter(range(num_requests))

            async def user() -> None:
                for i in counter:
                    await launch(e, i)

            await asyncio.gather(*(user() for _ in range(users)))

        async def open_loop() -> None:
            assert shape.rate is not None
            cap = asyncio.Semaphore(shape.concurrency) if shape.concurrency else None
            tasks = []
            for i, offset in enumerate(arrival_offsets(num_requests, shape.rate, shape.burstiness, seed)):
                delay = start + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                # Alternate which endpoint goes first so neither always gets the head start.
                order = range(len(endpoints)) if i % 2 == 0 else reversed(range(len(endpoints)))
                for e in order:
                    tasks.append(asyncio.ensure_future(_capped(cap, launch, e, i)))
            await asyncio.gather(*tasks)

        try:
            async with asyncio.timeout(max_duration_s):
                if shape.rate is None:
                    await asyncio.gather(*(closed_loop(e, shape.concurrency or 1) for e in range(len(endpoints))))
                else:
                    await open_loop()
        except TimeoutError:
            pass
        for task in list(in_flight):
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
    run.duration_s = time.perf_counter() - start
    for e in range(len(endpoints)):
        run.unfinished[e] = max(0, num_requests - len(run.results[e])) if run.duration_s >= max_duration_s else 0
    return run


async def _capped(cap: asyncio.Semaphore | None, launch: Callable[[int, int], asyncio.Task[RequestResult]],
                  e: int, i: int) -> None:
    if cap is None:
        await launch(e, i)
        return
    async with cap:
        await launch(e, i)
