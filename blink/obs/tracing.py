"""OpenTelemetry spans per request, with one child span per stage (GenAI semantic conventions).

Spans are built after the request finished, from its ``RequestTrace`` and with the recorded
timestamps: finished ``ReadableSpan``s go straight to the span processor, skipping the SDK's
live-span machinery (context switching, locks, per-attribute validation), which would cost more
than the rest of the request's observability together. With no exporter configured no
``Tracing`` object exists and the SDK is never imported: zero cost. The provider state is
private to this object; the process-global OpenTelemetry provider is left alone.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from blink.obs.trace import RequestTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

# GenAI operation names (OpenTelemetry semantic conventions, gen_ai.operation.name).
_OPERATIONS = {"chat": "chat", "completions": "text_completion"}


class Tracing:
    """Exports one span tree per finished request through ``exporter`` (OTLP in production)."""

    def __init__(self, exporter: SpanExporter, service_name: str = "blink", batch: bool = True,
                 sample_ratio: float = 1.0) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import (
            SpanContext,
            SpanKind,
            Status,
            StatusCode,
            TraceFlags,
            get_current_span,
        )
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        class FrozenResource(Resource):
            """The OTLP encoder groups spans by resource, hashing it per span (a JSON dump each
            time: a third of the export cost); this resource never changes, so hash it once."""

            def __init__(self, attributes: Any, schema_url: str | None) -> None:
                super().__init__(attributes, schema_url)
                self._hash = super().__hash__()

            def __hash__(self) -> int:
                return self._hash

            def __eq__(self, other: object) -> bool:
                return self is other or super().__eq__(other)

        resource = Resource.create({"service.name": service_name})
        self._resource = FrozenResource(resource.attributes, resource.schema_url)
        # Batching moves export (encoding + network I/O) to the SDK's background thread.
        self._processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self._scope = InstrumentationScope("blink.gateway")
        self._propagator = TraceContextTextMapPropagator()
        self._span = ReadableSpan
        self._context = SpanContext
        self._sampled = TraceFlags(TraceFlags.SAMPLED)
        self._server, self._internal = SpanKind.SERVER, SpanKind.INTERNAL
        self._ok = Status()
        self._error = lambda text: Status(StatusCode.ERROR, text)
        self._current_span = get_current_span
        self._rng = random.Random()
        self.sample_ratio = sample_ratio

    @classmethod
    def otlp(cls, endpoint: str, service_name: str = "blink", sample_ratio: float = 1.0) -> Tracing:
        """OTLP over HTTP/protobuf to ``endpoint`` (a collector base URL or its /v1/traces URL)."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
        return cls(OTLPSpanExporter(endpoint=url), service_name, sample_ratio=sample_ratio)

    def export(self, t: RequestTrace) -> None:
        def ns(perf: float) -> int:
            return t.start_ns + int((perf - t.start) * 1e9)

        parent = None
        if t.traceparent:
            remote = self._current_span(self._propagator.extract({"traceparent": t.traceparent})).get_span_context()
            parent = remote if remote.is_valid else None
        # Parent-based sampling: follow the caller's decision, else sample ``sample_ratio`` of requests.
        if parent is not None:
            if not parent.trace_flags.sampled:
                return
        elif self.sample_ratio < 1.0 and self._rng.random() >= self.sample_ratio:
            return
        trace_id = parent.trace_id if parent is not None else self._rng.getrandbits(128) or 1
        root_ctx = self._context(trace_id, self._rng.getrandbits(64) or 1, is_remote=False, trace_flags=self._sampled)
        op = _OPERATIONS.get(t.route, t.route)
        end = ns(t.end if t.end is not None else t.start + t.e2e)
        status = self._error(t.error_type or str(t.status)) if t.status >= 400 else self._ok
        for s in t.stages:
            ctx = self._context(trace_id, self._rng.getrandbits(64) or 1, is_remote=False, trace_flags=self._sampled)
            self._processor.on_end(self._span(
                f"blink.{s.name}", ctx, root_ctx, self._resource, kind=self._internal, start_time=ns(s.start),
                end_time=ns(s.start + s.seconds), instrumentation_scope=self._scope))
        self._processor.on_end(self._span(
            f"{op} {t.model}", root_ctx, parent, self._resource, attributes=_attributes(t, op), kind=self._server,
            status=status, start_time=t.start_ns, end_time=end, instrumentation_scope=self._scope))

    def shutdown(self) -> None:
        """Flush pending spans and stop the export thread."""
        self._processor.shutdown()


def _attributes(t: RequestTrace, op: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": op,
        "gen_ai.provider.name": "blink",
        "gen_ai.request.model": t.model,
        "gen_ai.response.model": t.backend or t.model,
        "gen_ai.usage.input_tokens": t.prompt_tokens,
        "gen_ai.usage.output_tokens": t.completion_tokens,
        "http.response.status_code": t.status,
        "blink.route": t.route,
        "blink.tier": t.tier,
        "blink.cache": t.cache,
    }
    if t.request_id:
        attrs["gen_ai.response.id"] = t.request_id
    if t.finish_reason:
        attrs["gen_ai.response.finish_reasons"] = (t.finish_reason,)
    if t.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = t.max_tokens
    if t.temperature is not None:
        attrs["gen_ai.request.temperature"] = t.temperature
    if t.top_p is not None:
        attrs["gen_ai.request.top_p"] = t.top_p
    if t.ttft is not None:
        attrs["blink.ttft_ms"] = round(t.ttft * 1000.0, 3)
    if t.key_id:
        attrs["blink.key_id"] = t.key_id
    if t.error_type:
        attrs["error.type"] = t.error_type
    for key, value in t.attributes.items():
        attrs[f"blink.{key}"] = value
    return attrs
