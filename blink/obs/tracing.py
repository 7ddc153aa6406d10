"""OpenTelemetry spans per request, with one child span per stage (GenAI semantic conventions).

Spans are built after the request finished, from its ``RequestTrace`` and its recorded
timestamps, in a background thread (``blink.obs.otlp``): the request path pays for a sampling
decision and a queue append. With no exporter configured no ``Tracing`` object exists and no
OpenTelemetry code is imported: zero cost. A client's W3C ``traceparent`` is continued, and its
sampled flag decides (parent-based sampling, OpenTelemetry's default); otherwise
``sample_ratio`` of requests are traced.
"""

from __future__ import annotations

import random
import re
from typing import Any, Protocol

from blink.obs.trace import RequestTrace

# W3C trace context: version-trace_id-parent_id-flags.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_OPERATIONS = {"chat": "chat", "completions": "text_completion"}


class SpanSink(Protocol):
    def submit(self, t: RequestTrace, trace_id: bytes | None, parent_span_id: bytes | None) -> None: ...

    def shutdown(self) -> None: ...


class Tracing:
    def __init__(self, sink: SpanSink, sample_ratio: float = 1.0) -> None:
        self._sink = sink
        self.sample_ratio = sample_ratio
        self._rng = random.Random()

    @classmethod
    def otlp(cls, endpoint: str, service_name: str = "blink", sample_ratio: float = 1.0) -> Tracing:
        """OTLP over HTTP/protobuf to ``endpoint`` (a collector base URL or its /v1/traces URL)."""
        from blink.obs.otlp import OTLPExporter

        return cls(OTLPExporter(endpoint, service_name, span_attributes), sample_ratio)

    def export(self, t: RequestTrace) -> None:
        trace_id = parent = None
        match = _TRACEPARENT.match(t.traceparent.strip().lower()) if t.traceparent else None
        if match is not None and match.group(1) != "0" * 32 and match.group(2) != "0" * 16:
            if not int(match.group(3), 16) & 1:  # the caller decided not to sample
                return
            trace_id, parent = bytes.fromhex(match.group(1)), bytes.fromhex(match.group(2))
        elif self.sample_ratio < 1.0 and self._rng.random() >= self.sample_ratio:
            return
        self._sink.submit(t, trace_id, parent)

    def shutdown(self) -> None:
        """Flush pending spans and stop the export thread."""
        self._sink.shutdown()


def span_attributes(t: RequestTrace) -> dict[str, Any]:
    """The request span's attributes: GenAI semantic conventions plus ``blink.*``."""
    op = _OPERATIONS.get(t.route, t.route)
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
