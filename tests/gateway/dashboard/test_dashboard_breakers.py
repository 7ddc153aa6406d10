"""The dashboard shows breaker states from whatever exports ``blink_breaker_state``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from blink.gateway.dashboard.breakers import breaker_states


class _Breakers(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("blink_breaker_state", "doc", labels=["route", "tier", "replica"])
        g.add_metric(["chat", "fast", "r1"], 0)
        g.add_metric(["chat", "fast", "r2"], 2)
        g.add_metric(["chat", "big", "r3"], 1)
        yield g


def test_states_by_replica() -> None:
    registry = CollectorRegistry(auto_describe=True)  # as GatewayMetrics builds it
    assert breaker_states(registry) == {}
    registry.register(_Breakers())
    assert breaker_states(registry) == {"chat/fast/r1": "closed", "chat/fast/r2": "open", "chat/big/r3": "half_open"}
