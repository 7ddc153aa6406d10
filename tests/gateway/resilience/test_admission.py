"""Admission control: concurrency cap, bounded priority queue, fast shedding with retry-after."""

from __future__ import annotations

import asyncio
import time

import httpx
from fault_upstream import FaultUpstream
from live_server import LiveServer
from routed_gateway import FULL, client, routed_gateway, stream_chat
from upstream_server import FakeUpstream

from blink.gateway.resilience.admission import AdmissionConfig, AdmissionController


async def test_slots_then_queue_then_shed() -> None:
    ac = AdmissionController("t", AdmissionConfig(max_concurrency=1, max_queue=2))
    first = ac.try_enter("normal", None)
    assert first is not None and first.done()
    waiting = [ac.try_enter("normal", None), ac.try_enter("normal", None)]
    assert all(w is not None and not w.done() for w in waiting)
    assert ac.try_enter("normal", None) is None  # queue full: shed at once
    (await first).release(10.0)
    assert waiting[0] is not None and waiting[0].done()


async def test_interactive_lane_goes_first_and_batch_gets_half_the_queue() -> None:
    ac = AdmissionController("t", AdmissionConfig(max_concurrency=1, max_queue=4))
    holder = ac.try_enter("normal", None)
    assert holder is not None
    batch = [ac.try_enter("batch", None), ac.try_enter("batch", None)]
    assert ac.try_enter("batch", None) is None  # batch may use only half the queue
    voice = ac.try_enter("interactive", None)
    assert voice is not None and all(b is not None for b in batch)
    (await holder).release()
    assert voice.done() and not any(b.done() for b in batch if b is not None)


async def test_predicted_wait_over_budget_is_shed() -> None:
    ac = AdmissionController("t", AdmissionConfig(max_concurrency=1, max_queue=10))
    holder = ac.try_enter("normal", None)
    assert holder is not None
    (await holder).release(200.0)  # learn a 200 ms service time
    holder = ac.try_enter("normal", None)
    assert holder is not None and holder.done()
    assert ac.try_enter("normal", 100.0) is None  # would wait ~200 ms > 100 ms budget
    queued = ac.try_enter("normal", 1000.0)
    assert queued is not None
    ac.abandon(queued)  # a waiter that gives up leaves the queue
    assert ac.queued == 0


def test_overload_sheds_fast_with_retry_after_and_serves_the_admitted(upstream: FakeUpstream) -> None:
    slow = FaultUpstream(tokens=8, fault="slow_first", slow_s=0.4)
    tiers = [{"name": "only", "replicas": ["slow"], "max_concurrency": 1, "max_queue": 1}]
    with LiveServer(slow) as up, routed_gateway(tiers, {"slow": f"{up.url}/v1"}, first_token_timeout_s=5) as gw:

        async def one(http: httpx.AsyncClient) -> tuple[int, float, str]:
            t0 = time.perf_counter()
            body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with http.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as resp:
                status = resp.status_code
                elapsed = time.perf_counter() - t0
                await resp.aread()
                return status, elapsed, resp.headers.get("retry-after", "")

        async def burst() -> list[tuple[int, float, str]]:
            async with httpx.AsyncClient(timeout=10) as http:
                return await asyncio.gather(*(one(http) for _ in range(5)))

        results = asyncio.run(burst())
    ok = [r for r in results if r[0] == 200]
    shed = [r for r in results if r[0] == 503]
    assert len(ok) == 2 and len(shed) == 3  # one running + one queued; the rest shed
    assert all(r[2] for r in shed) and all(r[1] < 0.3 for r in shed)  # fast, with retry-after


def test_degrades_to_another_tier_when_the_chosen_one_is_full(upstream: FakeUpstream) -> None:
    slow = FaultUpstream(tokens=8, fault="slow_first", slow_s=0.4)
    tiers = [
        {"name": "large", "replicas": ["slow"], "cost": 1, "max_concurrency": 1, "max_queue": 0},
        {"name": "small", "replicas": ["good"], "cost": 0},
    ]
    urls = {"good": upstream.base_url}
    with LiveServer(slow) as up:
        urls["slow"] = f"{up.url}/v1"
        with routed_gateway(tiers, urls, default_tier="large", first_token_timeout_s=5) as gw:

            async def two() -> list[str]:
                async with httpx.AsyncClient(timeout=10) as http:
                    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
                    rs = await asyncio.gather(*(http.post(f"{gw.url}/v1/chat/completions", json=body) for _ in range(2)))
                    return [r.json()["choices"][0]["message"]["content"] for r in rs]

            assert asyncio.run(two()) == [FULL, FULL]
            assert slow.hits == 1  # the second request went to the small tier instead of waiting
            assert stream_chat(client(gw)) == (FULL, "stop")
