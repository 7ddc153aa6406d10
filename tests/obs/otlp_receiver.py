"""A real OTLP/HTTP trace receiver (protobuf) for tests: keeps every span it is sent."""

from __future__ import annotations

import threading
from typing import Any

from asgi_parts import read_body, serve_lifespan
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class OTLPReceiver:
    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.received = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        body = await read_body(receive)
        status = 404
        if scope["path"] == "/v1/traces":
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    self.spans.extend(ss.spans)
            self.received.set()
            status = 200
        out = ExportTraceServiceResponse().SerializeToString()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/x-protobuf")]})
        await send({"type": "http.response.body", "body": out})


def attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = [x.string_value for x in v.array_value.values] if kind == "array_value" else getattr(v, kind)
    return out
