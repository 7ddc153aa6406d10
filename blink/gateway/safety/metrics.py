"""The safety stage's counters on /metrics, read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from blink.gateway.safety.stage import SafetyStage


class SafetyCollector(Collector):
    def __init__(self, stage: SafetyStage) -> None:
        self._stage = stage

    def collect(self) -> Iterator[Metric]:
        c = self._stage.counters
        yield CounterMetricFamily("blink_safety_checked", "Exchanges checked after their response (async)", value=c.checked)
        yield CounterMetricFamily("blink_safety_blocked", "Requests or streams stopped in blocking mode", value=c.blocked)
        yield CounterMetricFamily("blink_safety_errors", "Checks that failed (the answer was not cached)", value=c.errors)
        flagged = CounterMetricFamily("blink_safety_flagged", "Flagged exchanges by category", labels=["category"])
        for category, n in sorted(c.by_category.items()):
            flagged.add_metric([category], n)
        yield flagged
        yield GaugeMetricFamily("blink_safety_backlog", "Async exchanges waiting for an idle loop", value=self._stage.backlog())
        yield CounterMetricFamily("blink_safety_deferrals", "Idle probes that found the loop busy", value=self._stage.gate.deferrals)
