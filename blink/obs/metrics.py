"""A few basic Prometheus metrics, one registry per app (no process-global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# TTFT buckets from 5 ms (cache hits) to 30 s (long prompts on a CPU).
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "blink_requests", "Generation requests by endpoint and status.", ["endpoint", "status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "blink_ttft_seconds", "Server-side time to the first delta.", ["endpoint"],
            buckets=_TTFT_BUCKETS, registry=self.registry,
        )
        self.disconnects = Counter(
            "blink_client_disconnects", "Generations aborted because the client went away.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
