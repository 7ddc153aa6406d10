"""A lean OTLP/HTTP (protobuf) span exporter: request records in, ``ExportTraceServiceRequest`` out.

The request path only appends the finished ``RequestTrace`` to a bounded queue. A
background thread turns a batch of them into OTLP protobuf directly, without the SDK's generic
span objects and encoder (which cost several times more per span; benchmarks/RESULTS.md,
"Observability cost"), and POSTs it to the collector. Telemetry
must never hurt serving: when the queue is full or the collector is down, spans are dropped and
counted, never retried in a loop.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import httpx

from blink.obs.trace import RequestTrace

log = logging.getLogger("blink.obs")

# One request becomes 1 + (number of stages) spans; 512 requests per POST keeps bodies under
# ~1 MB, and a 1 s flush bounds how stale a trace is in the collector.
MAX_BATCH = 512
FLUSH_INTERVAL_S = 1.0
# 8 batches of backlog (a few seconds at thousands of requests/s) before dropping.
MAX_QUEUE = 8 * MAX_BATCH

_SERVER, _INTERNAL = 2, 1  # Span.SpanKind: SPAN_KIND_SERVER, SPAN_KIND_INTERNAL
_STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR


class OTLPExporter:
    def __init__(self, endpoint: str, service_name: str, attributes: Callable[[RequestTrace], dict[str, Any]],
                 headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2

        self.url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
        self._pb_request = trace_service_pb2.ExportTraceServiceRequest
        self._resource = resource_pb2.Resource(attributes=[
            common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=service_name)),
            common_pb2.KeyValue(key="telemetry.sdk.name", value=common_pb2.AnyValue(string_value="blink")),
        ])
        self._scope = common_pb2.InstrumentationScope(name="blink.gateway")
        self._attributes = attributes
        self._client = httpx.Client(timeout=timeout_s, headers={"content-type": "application/x-protobuf",
                                                                **(headers or {})})
        self._queue: deque[tuple[RequestTrace, bytes, bytes | None]] = deque(maxlen=MAX_QUEUE)
        self._wake = threading.Event()
        self._stop = False
        self._rng = random.Random()
        self.dropped = 0
        self.exported = 0
        self._thread = threading.Thread(target=self._run, name="blink-otlp-export", daemon=True)
        self._thread.start()

    def submit(self, t: RequestTrace, trace_id: bytes | None, parent_span_id: bytes | None) -> None:
        """Queue one finished request (called on the event loop; never blocks)."""
        if len(self._queue) == MAX_QUEUE:
            self.dropped += 1  # deque(maxlen) would drop the oldest silently; count it instead
            return
        self._queue.append((t, trace_id or self._rng.randbytes(16), parent_span_id))
        if len(self._queue) >= MAX_BATCH:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            self.flush()
        self.flush()

    def flush(self) -> None:
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            body = self.encode(batch)
            try:
                resp = self._client.post(self.url, content=body)
                if resp.status_code >= 300:
                    raise httpx.HTTPStatusError(f"HTTP {resp.status_code}", request=resp.request, response=resp)
                self.exported += len(batch)
            except httpx.HTTPError as exc:
                self.dropped += len(batch)
                log.warning("OTLP export to %s failed (%s); dropped %d request traces", self.url, exc, len(batch))

    def encode(self, batch: list[tuple[RequestTrace, bytes, bytes | None]]) -> bytes:
        req = self._pb_request()
        rs = req.resource_spans.add()
        rs.resource.CopyFrom(self._resource)
        ss = rs.scope_spans.add()
        ss.scope.CopyFrom(self._scope)
        spans = ss.spans
        rand = self._rng.randbytes
        for t, trace_id, parent in batch:
            def ns(perf: float, t: RequestTrace = t) -> int:
                return t.start_ns + int((perf - t.start) * 1e9)

            root_id = rand(8)
            root = spans.add(trace_id=trace_id, span_id=root_id, name=f"{_op(t)} {t.model}", kind=_SERVER,
                             start_time_unix_nano=t.start_ns,
                             end_time_unix_nano=ns(t.end if t.end is not None else t.start + t.e2e))
            if parent is not None:
                root.parent_span_id = parent
            attrs = root.attributes
            for key, value in self._attributes(t).items():
                kv = attrs.add(key=key)
                _set_value(kv.value, value)
            if t.status >= 400:
                root.status.code = _STATUS_ERROR
                root.status.message = t.error_type or str(t.status)
            for s in t.stages:
                spans.add(trace_id=trace_id, span_id=rand(8), parent_span_id=root_id, name=f"blink.{s.name}",
                          kind=_INTERNAL, start_time_unix_nano=ns(s.start), end_time_unix_nano=ns(s.start + s.seconds))
        return req.SerializeToString()

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=10)
        self._client.close()


def _op(t: RequestTrace) -> str:
    return {"chat": "chat", "completions": "text_completion"}.get(t.route, t.route)


def _set_value(v: Any, value: Any) -> None:
    if isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int_value = value
    elif isinstance(value, float):
        v.double_value = value
    elif isinstance(value, tuple | list):
        for item in value:
            v.array_value.values.add(string_value=str(item))
    else:
        v.string_value = str(value)
