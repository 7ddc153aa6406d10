"""Per-model batching metrics on /metrics, read from the batchers' counters at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from blink.modelserver.server import ServedModels


class ModelServerCollector(Collector):
    def __init__(self, server: ServedModels) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        counters = {
            "batches": ("blink_modelserver_batches", "Model calls (batches) run"),
            "items": ("blink_modelserver_inputs", "Inputs computed"),
            "failed_items": ("blink_modelserver_failed_inputs", "Inputs whose batch failed"),
            "timed_out": ("blink_modelserver_timeouts", "Inputs that timed out in the queue"),
            "rejected": ("blink_modelserver_rejected", "Inputs refused with a full queue"),
            "compute_s": ("blink_modelserver_compute_seconds", "Time spent in model calls"),
            "queue_wait_s": ("blink_modelserver_queue_wait_seconds", "Summed queue wait of computed inputs"),
        }
        families = {k: CounterMetricFamily(n, h, labels=["model"]) for k, (n, h) in counters.items()}
        depth = GaugeMetricFamily("blink_modelserver_queue_depth", "Inputs waiting", labels=["model"])
        for m in self._server.models():
            st = m.batcher.stats
            for key, fam in families.items():
                fam.add_metric([m.name], float(getattr(st, key)))
            depth.add_metric([m.name], float(m.batcher.queue_depth()))
        yield from families.values()
        yield depth
