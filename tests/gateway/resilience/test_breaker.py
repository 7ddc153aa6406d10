"""Circuit breaker: trips on error rate, p99 TTFT and p99 ITL; half-open probes; through the gateway."""

from __future__ import annotations

import time

import httpx
from fault_upstream import FaultUpstream
from live_server import LiveServer
from routed_gateway import FULL, client, routed_gateway, stream_chat
from upstream_server import FakeUpstream

from blink.gateway.resilience.breaker import BreakerConfig, BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _breaker(**kw: float) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    return CircuitBreaker("b", BreakerConfig(min_requests=4, open_s=5.0, **kw), clock=clock), clock  # type: ignore[arg-type]


def test_opens_on_error_rate_and_sheds_until_half_open() -> None:
    b, clock = _breaker(error_rate=0.5)
    for ok in (True, False, True, False):
        b.record_success() if ok else b.record_failure()
    assert b.state is BreakerState.OPEN and not b.allow()
    clock.now += 5.0
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow() and not b.allow()  # one probe at a time
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.allow()


def test_failed_probe_reopens() -> None:
    b, clock = _breaker()
    for _ in range(4):
        b.record_failure()
    clock.now += 5.0
    assert b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN and b.trips == 2


def test_stays_closed_below_min_requests_and_below_rate() -> None:
    b, _ = _breaker(error_rate=0.5)
    for _ in range(3):
        b.record_failure()
    assert b.state is BreakerState.CLOSED  # 3 < min_requests
    b, _ = _breaker(error_rate=0.5)
    for _ in range(10):
        b.record_success(ttft_ms=10.0, itl_ms=5.0)
    b.record_failure()
    assert b.state is BreakerState.CLOSED


def test_opens_on_p99_ttft_and_on_p99_itl() -> None:
    b, _ = _breaker(ttft_p99_ms=100.0, itl_p99_ms=None)
    for _ in range(4):
        b.record_success(ttft_ms=250.0)
    assert b.state is BreakerState.OPEN and "TTFT" in b.last_reason
    b, _ = _breaker(ttft_p99_ms=None, itl_p99_ms=50.0)
    for _ in range(4):
        b.record_success(ttft_ms=5.0, itl_ms=80.0)
    assert b.state is BreakerState.OPEN and "ITL" in b.last_reason


def test_old_samples_leave_the_window() -> None:
    b, clock = _breaker(error_rate=0.5, window_s=10.0)
    for _ in range(3):
        b.record_failure()
    clock.now += 11.0
    b.record_failure()
    assert b.state is BreakerState.CLOSED  # only one failure left in the window


def test_cancelled_probe_frees_its_slot() -> None:
    b, clock = _breaker()
    for _ in range(4):
        b.record_failure()
    clock.now += 5.0
    assert b.allow() and not b.allow()
    b.release_probe()
    assert b.allow()


def _state(gw: LiveServer, replica: str) -> float:
    for line in httpx.get(f"{gw.url}/metrics").text.splitlines():
        if line.startswith("blink_breaker_state{") and f'replica="{replica}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no breaker state for {replica}")


def test_breaker_opens_and_closes_through_the_gateway(upstream: FakeUpstream) -> None:
    tiers = [{"name": "primary", "replicas": ["faulty"], "cost": 1}, {"name": "fallback", "replicas": ["good"], "cost": 0}]
    bad = FaultUpstream(fault="http_500")
    breaker = {"min_requests": 2, "open_s": 0.5, "error_rate": 0.5}
    with LiveServer(bad) as up:
        urls = {"faulty": f"{up.url}/v1", "good": upstream.base_url}
        with routed_gateway(tiers, urls, breaker=breaker) as gw:
            c = client(gw)
            for _ in range(2):
                assert stream_chat(c) == (FULL, "stop")
            assert _state(gw, "faulty") == 2  # open
            hits = bad.hits
            assert stream_chat(c) == (FULL, "stop")
            assert bad.hits == hits  # open: the faulty replica is not even tried
            bad.fault = None  # it recovers
            time.sleep(0.6)  # past open_s: half-open
            assert stream_chat(c) == (FULL, "stop")
            assert bad.hits == hits + 1  # the probe went to it and succeeded
            assert _state(gw, "faulty") == 0  # closed
            # Every transition and routing decision reached the request-level obs counters too.
            scrape = httpx.get(f"{gw.url}/metrics").text
            for state in ("open", "half_open", "closed"):
                assert _counter(scrape, "blink_breaker_transitions_total", f'state="{state}"') >= 1
            assert _counter(scrape, "blink_router_decisions_total", 'backend="good"') >= 3
            assert _counter(scrape, "blink_router_decisions_total", 'backend="faulty"') >= 1


def _counter(scrape: str, name: str, label: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in scrape.splitlines()
               if line.startswith(name + "{") and label in line)
