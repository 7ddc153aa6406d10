"""OpenTelemetry spans per request, with one child span per stage (GenAI semantic conventions).

Spans are built after the request finished, from its ``RequestTrace`` and with explicit
timestamps, so the request path never touches the tracing SDK. With no exporter configured no
``Tracing`` object exists at all and the SDK is never imported: zero cost. The provider is
private to this object (the process-global OpenTelemetry provider is left alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from blink.obs.trace import RequestTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

# GenAI operation names (OpenTelemetry semantic conventions, gen_ai.operation.name).
_OPERATIONS = {"chat": "chat", "completions": "text_completion"}


class Tracing:
    """Exports one span tree per finished request through ``exporter`` (OTLP in production)."""

    def __init__(self, exporter: SpanExporter, service_name: str = "blink", batch: bool = True) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        # Batching moves export (network I/O) to the SDK's background thread.
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("blink.gateway")
        self._propagator = TraceContextTextMapPropagator()
        self._kind_server = SpanKind.SERVER
        self._kind_internal = SpanKind.INTERNAL
        self._status = Status
        self._error = StatusCode.ERROR
        self._in_context = set_span_in_context

    @classmethod
    def otlp(cls, endpoint: str, service_name: str = "blink") -> Tracing:
        """OTLP over HTTP/protobuf to ``endpoint`` (a collector base URL or its /v1/traces URL)."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
        return cls(OTLPSpanExporter(endpoint=url), service_name)

    def export(self, t: RequestTrace) -> None:
        def ns(perf: float) -> int:
            return t.start_ns + int((perf - t.start) * 1e9)

        op = _OPERATIONS.get(t.route, t.route)
        parent = None
        if t.traceparent:
            parent = self._propagator.extract({"traceparent": t.traceparent})
        span = self._tracer.start_span(f"{op} {t.model}", context=parent, kind=self._kind_server,
                                       start_time=t.start_ns, attributes=_attributes(t, op))
        ctx = self._in_context(span)
        for s in t.stages:
            child = self._tracer.start_span(f"blink.{s.name}", context=ctx, kind=self._kind_internal,
                                            start_time=ns(s.start))
            child.end(end_time=ns(s.start + s.seconds))
        if t.status >= 400:
            span.set_status(self._status(self._error, t.error_type or str(t.status)))
        span.end(end_time=ns(t.end if t.end is not None else t.start + t.e2e))

    def shutdown(self) -> None:
        """Flush pending spans and stop the export thread."""
        self._provider.shutdown()


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
        attrs["gen_ai.response.finish_reasons"] = [t.finish_reason]
    if t.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = t.max_tokens
    if t.temperature is not None:
        attrs["gen_ai.request.temperature"] = t.temperature
    if t.top_p is not None:
        attrs["gen_ai.request.top_p"] = t.top_p
    if t.ttft is not None:
        attrs["blink.ttft_ms"] = round(t.ttft * 1000.0, 3)
    if t.error_type:
        attrs["error.type"] = t.error_type
    for key, value in t.attributes.items():
        attrs[f"blink.{key}"] = value
    return attrs
