"""Hedging (second attempt at the replica's p95 TTFT, loser cancelled) and stream time limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from fault_upstream import FaultUpstream
from live_server import LiveServer

from blink.backends.base import Delta, GenerationRequest, SamplingOptions
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.gateway.resilience.hedge import HedgeConfig
from blink.gateway.resilience.timeouts import DeadlineExceeded, FirstTokenTimeout, StallTimeout, next_delta
from blink.gateway.router.routed import RoutedBackend, RoutedConfig
from blink.gateway.router.tier import Tier


def _req(deadline_s: float = 10.0) -> GenerationRequest:
    messages = [{"role": "user", "content": "hi"}]
    return GenerationRequest(
        request_id="r", model="auto", kind="chat", options=SamplingOptions(), messages=messages,
        deadline=time.monotonic() + deadline_s,
    )  # fmt: skip


async def test_hedge_wins_on_the_fast_replica_and_cancels_the_slow_one() -> None:
    slow, fast = FaultUpstream(tokens=4), FaultUpstream(tokens=4)
    with LiveServer(slow) as s1, LiveServer(fast) as s2:
        a, b = OpenAIHTTPBackend("slow", f"{s1.url}/v1"), OpenAIHTTPBackend("fast", f"{s2.url}/v1")
        config = RoutedConfig(hedge=HedgeConfig(enabled=True, min_samples=5, min_delay_ms=20.0))
        routed = RoutedBackend("auto", [Tier("t", [a, b])], config=config)
        await routed.start()
        # Warm-up: "fast" answers in 50 ms, "slow" at once, so peak-EWMA P2C prefers "slow"...
        fast.fault, fast.slow_s = "slow_first", 0.05
        try:
            for _ in range(30):
                assert "".join([d.text async for d in routed.stream(_req())]) == " t0 t1 t2 t3"
                if len(routed.tiers["t"].replicas[0].ttft) >= 5:
                    break
            # ...then "slow" stalls 2 s before its first token and "fast" is instant.
            slow.fault, slow.slow_s = "slow_first", 2.0
            fast.fault = None
            hedged_before = routed.counters.hedges
            for _ in range(5):
                t0 = time.perf_counter()
                text = "".join([d.text async for d in routed.stream(_req())])
                assert text == " t0 t1 t2 t3"
                assert time.perf_counter() - t0 < 1.5  # never waited out the slow replica's 2 s
                if routed.counters.hedges > hedged_before:
                    break
            assert routed.counters.hedges > hedged_before
            await asyncio.wait_for(asyncio.to_thread(slow.cancelled_event.wait, 5), 6)
            assert slow.cancelled >= 1  # the loser's upstream request was cancelled
            assert all(r.in_flight == 0 for r in routed.tiers["t"].replicas)
        finally:
            await routed.aclose()


async def _gen(gaps: list[float]) -> AsyncIterator[Delta]:
    for gap in gaps:
        await asyncio.sleep(gap)
        yield Delta(text="x")


async def test_first_token_timeout_stall_timeout_and_deadline() -> None:
    with pytest.raises(FirstTokenTimeout):
        await next_delta(_gen([1.0]), 0.05, None, first=True)
    it = _gen([0.0, 1.0])
    assert (await next_delta(it, 0.05, None, first=True)).text == "x"
    with pytest.raises(StallTimeout):
        await next_delta(it, 0.05, None, first=False)
    with pytest.raises(DeadlineExceeded):
        await next_delta(_gen([1.0]), 5.0, time.monotonic() + 0.05, first=True)
    assert (await next_delta(_gen([0.0]), None, None, first=True)).text == "x"


async def test_deadline_bounds_a_routed_request_on_a_stalled_backend() -> None:
    stalled = FaultUpstream(tokens=4, fault="stall_first")
    with LiveServer(stalled) as s:
        routed = RoutedBackend("auto", [Tier("t", [OpenAIHTTPBackend("s", f"{s.url}/v1")])])
        t0 = time.perf_counter()
        with pytest.raises(DeadlineExceeded):
            _ = [d async for d in routed.stream(_req(deadline_s=0.3))]
        assert time.perf_counter() - t0 < 1.0
        await routed.aclose()
