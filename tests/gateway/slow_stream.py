"""One route that streams a slow or failing upstream through ``GenerationResponse``.

The keep-alive and late-failure tests of every wire format (chat's SSE, Responses, Messages) run
against it: only the request and the wire differ (the ``slow_then`` fixture, in conftest.py,
starts the upstream).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from blink.backends.base import GenerationRequest
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.gateway.rendering.generation_response import GenerationResponse
from blink.obs.metrics import GatewayMetrics

PATH = "/stream"


def slow_stream_app(base_url: str, make_request: Callable[[], GenerationRequest],
                    wire: Callable[[GenerationRequest], Any] | None = None) -> Starlette:
    """POST ``PATH``: ``make_request()`` streamed from ``base_url`` with 0.1 s keep-alives and a
    0.6 s read timeout, written by ``wire(req)`` (None: chat's SSE)."""
    backend = OpenAIHTTPBackend("up", base_url, read_timeout_s=0.6)
    metrics = GatewayMetrics()

    async def stream(request: Request) -> Response:
        req = make_request()
        return GenerationResponse(backend, req, stream=True, include_usage=False, t0=time.perf_counter(),
                                  metrics=metrics, timeout_s=10, keepalive_s=0.1,
                                  wire=wire(req) if wire is not None else None)

    return Starlette(routes=[Route(PATH, stream, methods=["POST"])])
