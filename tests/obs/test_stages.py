"""The stage API other layers call: no-ops outside a request, recorded inside one."""

from __future__ import annotations

import time

import pytest

from blink.obs import annotate, count, current_trace, lap, record_stage, stage
from blink.obs.live import LiveStats, percentile
from blink.obs.stages import bind, unbind
from blink.obs.trace import RequestTrace


def test_calls_outside_a_request_do_nothing() -> None:
    assert current_trace() is None
    with stage("cache"):
        pass
    record_stage("auth", 0.001)
    lap("parse")
    annotate(cache="exact")
    count("shed", reason="queue_full")


def test_stages_annotations_and_events_land_on_the_bound_trace() -> None:
    trace = RequestTrace(route="chat")
    token = bind(trace)
    try:
        lap("parse")
        with stage("cache"):
            time.sleep(0.01)
        record_stage("auth", 0.002)
        lap("router")
        annotate(cache="semantic", key_id="k1", model="m", tier="fast", policy="rules")
        count("router_decision", route="m", backend="local")
        with pytest.raises(ValueError, match="unknown event"):
            count("nope")
    finally:
        unbind(token)
    names = [s.name for s in trace.stages]
    assert names == ["parse", "cache", "auth", "router"]
    cache = trace.stages[1]
    assert 0.009 < cache.seconds < 1.0
    router = trace.stages[3]
    # lap() starts where the previous stage ended.
    auth = trace.stages[2]
    assert router.start == pytest.approx(auth.start + auth.seconds)
    assert (trace.cache, trace.key_id, trace.model, trace.tier) == ("semantic", "k1", "m", "fast")
    assert trace.attributes == {"policy": "rules"}
    assert trace.events == [("router_decision", {"route": "m", "backend": "local"})]


def test_live_stats_percentiles_and_window() -> None:
    now = [1000.0]
    live = LiveStats(window_s=10, clock=lambda: now[0])
    for ms in range(1, 101):
        t = RequestTrace(route="chat", backend="b", cache="miss")
        t.first_token = t.start + ms / 1000.0
        t.end = t.first_token
        live.add(t)
    snap = live.snapshot()
    assert snap["series"]["ttft_p50"][-1] == pytest.approx(50.0, abs=0.5)
    assert snap["series"]["ttft_p99"][-1] == pytest.approx(99.0, abs=0.5)
    assert snap["series"]["rps"][-1] == 100 and snap["totals"]["routes"] == {"b": 100}
    now[0] += 30  # past the window: old buckets are dropped, series stay 120 points long
    snap = live.snapshot()
    assert len(snap["series"]["t"]) == 120 and sum(snap["series"]["rps"]) == 0
    assert percentile([], 50) is None and percentile([1.0], 99.9) == 1.0


def test_live_stats_closed_seconds_keep_their_percentiles() -> None:
    """A second's percentiles are computed once it is over (a snapshot re-sorts only the current
    second); the series read the same before and after, and the current second stays live."""
    now = [2000.0]
    live = LiveStats(window_s=120, clock=lambda: now[0])

    def add(ms: float) -> None:
        t = RequestTrace(route="chat")
        t.first_token = t.start + ms / 1000.0
        t.end = t.first_token
        live.add(t)

    add(10)
    add(30)
    first = live.snapshot()["series"]["ttft_p99"][-1]
    now[0] += 1
    add(70)
    snap = live.snapshot()["series"]
    assert snap["ttft_p99"][-2] == first == pytest.approx(30.0, abs=0.5)
    assert snap["ttft_p99"][-1] == pytest.approx(70.0, abs=0.5)
    add(90)  # the current second still takes samples
    assert live.snapshot()["series"]["ttft_p99"][-1] == pytest.approx(90.0, abs=0.5)
    assert live.snapshot()["series"]["ttft_p99"][-2] == pytest.approx(30.0, abs=0.5)
