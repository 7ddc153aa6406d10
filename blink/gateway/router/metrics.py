"""Breaker states and router counters as Prometheus metrics, read at scrape time.

A custom collector (no per-request metric calls on the hot path): each scrape walks the routed
backends and reports what their breakers and counters hold right then.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from blink.gateway.router.routed import RoutedBackend


class RouterCollector(Collector):
    def __init__(self, routed: Sequence[RoutedBackend]) -> None:
        self._routed = list(routed)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = GaugeMetricFamily(
            "blink_breaker_state", "Circuit breaker state per replica: 0 closed, 1 half-open, 2 open.",
            labels=["route", "tier", "replica"],
        )  # fmt: skip
        trips = CounterMetricFamily(
            "blink_breaker_trips", "Times a replica's breaker opened.", labels=["route", "tier", "replica"]
        )
        in_flight = GaugeMetricFamily(
            "blink_replica_in_flight", "Requests in flight per replica.", labels=["route", "tier", "replica"]
        )
        events = CounterMetricFamily(
            "blink_router_events", "Retries, hedges, escalations, shed and continued requests.", labels=["route", "event"]
        )
        depth = GaugeMetricFamily("blink_admission_queue_depth", "Requests queued for a tier slot, by priority class.",
                                  labels=["route", "tier", "priority"])
        waited = CounterMetricFamily("blink_admission_waited", "Requests that queued for a tier slot, by priority class.",
                                     labels=["route", "tier", "priority"])
        wait_s = CounterMetricFamily("blink_admission_wait_seconds", "Summed queue wait for a tier slot, by priority class.",
                                     labels=["route", "tier", "priority"])
        for routed in self._routed:
            for tier in routed.tiers.values():
                adm = tier.admission
                for lane, n in adm.queued_by_lane().items():
                    depth.add_metric([routed.name, tier.name, lane], n)
                    waited.add_metric([routed.name, tier.name, lane], adm.waited[lane])
                    wait_s.add_metric([routed.name, tier.name, lane], adm.wait_s[lane])
                for r in tier.replicas:
                    labels = [routed.name, tier.name, r.name]
                    state.add_metric(labels, r.breaker.state.value)
                    trips.add_metric(labels, r.breaker.trips)
                    in_flight.add_metric(labels, r.in_flight)
            c = routed.counters
            for event, value in (("retry", c.retries), ("hedge", c.hedges), ("escalation", c.escalations),
                                 ("shed", c.shed), ("continued", c.continued)):  # fmt: skip
                events.add_metric([routed.name, event], value)
        yield from (state, trips, in_flight, events, depth, waited, wait_s)
