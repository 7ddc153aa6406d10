"""SSE keep-alive comments while a long first token is pending; errors after them are SSE events."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from fault_upstream import FaultUpstream
from live_server import LiveServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.gateway.rendering.generation_response import GenerationResponse
from blink.obs.metrics import GatewayMetrics


@pytest.fixture
def slow_then(request: pytest.FixtureRequest) -> Iterator[tuple[FaultUpstream, str]]:
    up = FaultUpstream(tokens=4, fault=request.param, slow_s=0.35)
    with LiveServer(up) as server:
        yield up, f"{server.url}/v1"


def _app(base_url: str) -> Starlette:
    backend = OpenAIHTTPBackend("up", base_url, read_timeout_s=0.6)
    metrics = GatewayMetrics()

    async def chat(request: Request) -> Response:
        messages = [{"role": "user", "content": "hi"}]
        req = GenerationRequest("r", "m", "chat", SamplingOptions(), messages=messages, raw={"messages": messages})
        return GenerationResponse(backend, req, stream=True, include_usage=False, t0=time.perf_counter(),
                                  metrics=metrics, timeout_s=10, keepalive_s=0.1)  # fmt: skip

    return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


@pytest.mark.parametrize("slow_then", ["slow_first"], indirect=True)
def test_comments_flow_before_a_slow_first_token(slow_then: tuple[FaultUpstream, str]) -> None:
    with LiveServer(_app(slow_then[1])) as gw:
        body = httpx.post(f"{gw.url}/chat", timeout=10).text
    head, _, rest = body.partition("data: ")
    assert head.count(": keep-alive\n\n") >= 2  # ~0.35 s / 0.1 s before the first event
    assert '" t0"' in rest and rest.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("slow_then", ["stall_first"], indirect=True)
def test_failure_after_comments_is_an_explicit_sse_error(slow_then: tuple[FaultUpstream, str]) -> None:
    with LiveServer(_app(slow_then[1])) as gw:
        r = httpx.post(f"{gw.url}/chat", timeout=10)
    assert r.status_code == 200 and r.text.startswith(": keep-alive")
    assert '"error"' in r.text and "[DONE]" not in r.text  # the read timeout ends it loudly
