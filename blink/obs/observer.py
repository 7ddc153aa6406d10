"""The gateway's one observability object: starts request traces and fans finished ones out.

Sinks (Prometheus metrics, OpenTelemetry spans, the JSON request log, the dashboard's live
stats) each read the finished ``RequestTrace`` once. A sink that is switched off is ``None``
and costs nothing; with every sink off a request pays for one small dataclass and a few
``perf_counter()`` calls.
"""

from __future__ import annotations

import logging
import time

from blink.obs.engine_collector import LoadSource
from blink.obs.live import LiveStats
from blink.obs.metrics import GatewayMetrics
from blink.obs.request_log import RequestLogger
from blink.obs.stages import check_event
from blink.obs.trace import RequestTrace
from blink.obs.tracing import Tracing

log = logging.getLogger("blink.obs")


class Observability:
    def __init__(
        self,
        *,
        loads: LoadSource | None = None,
        metrics: bool = True,
        tracing: Tracing | None = None,
        request_log: RequestLogger | None = None,
        live: bool = True,
    ) -> None:
        self._loads = loads
        # The registry always exists so /metrics answers; with metrics off it carries no samples.
        self.metrics = GatewayMetrics(loads if metrics else None)
        self.metrics_enabled = metrics
        self.tracing = tracing
        self.request_log = request_log
        self.live = LiveStats() if live else None

    def begin(self, route: str) -> RequestTrace:
        if self.metrics_enabled:
            self.metrics.in_flight.inc()
        trace = RequestTrace(route=route)
        if self.request_log is not None and self.request_log.log_prompts:
            trace.output = []
        return trace

    def finish(self, trace: RequestTrace) -> None:
        """Hand a finished request to every sink; a failing sink is logged, never raised."""
        trace.end = time.perf_counter()
        try:
            if self.metrics_enabled:
                self.metrics.in_flight.dec()
                self.metrics.observe(trace)
            if self.live is not None:
                self.live.add(trace)
            if self.tracing is not None:
                self.tracing.export(trace)
            if self.request_log is not None:
                self.request_log.write(trace)
        except Exception:
            log.exception("recording request %s failed", trace.request_id)

    def event(self, event: str, **labels: str) -> None:
        """Count an event outside any request (a breaker opening on a health probe, a shed)."""
        check_event(event, labels)
        if self.metrics_enabled:
            self.metrics.event(event, labels)
        if self.live is not None and event == "breaker_transition":
            self.live.breaker(labels["backend"], labels["state"])

    def loads(self) -> list[tuple[str, object]]:
        return list(self._loads()) if self._loads is not None else []

    def close(self) -> None:
        if self.tracing is not None:
            self.tracing.shutdown()
        if self.request_log is not None:
            self.request_log.close()
