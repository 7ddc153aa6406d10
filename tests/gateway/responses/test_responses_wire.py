"""ResponsesWire on the shared generation loop: the events around keep-alives, slow and failed first tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
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
from blink.gateway.responses.http_response import ResponsesWire
from blink.gateway.responses.render import ResponseRenderer
from blink.obs.metrics import GatewayMetrics
from blink.protocol.responses import ResponsesRequest


@pytest.fixture
def slow_then(request: pytest.FixtureRequest) -> Iterator[str]:
    with LiveServer(FaultUpstream(tokens=4, fault=request.param, slow_s=0.35)) as server:
        yield f"{server.url}/v1"


def _app(base_url: str) -> Starlette:
    backend = OpenAIHTTPBackend("up", base_url, read_timeout_s=0.6)
    metrics = GatewayMetrics()

    async def responses(request: Request) -> Response:
        messages = [{"role": "user", "content": "hi"}]
        req = GenerationRequest("resp_1", "m", "chat", SamplingOptions(), messages=messages, raw={"messages": messages})
        body = ResponsesRequest.model_validate({"model": "m", "input": "hi", "stream": True})
        wire = ResponsesWire(ResponseRenderer("resp_1", "m", body, [], "auto"), None)
        return GenerationResponse(backend, req, stream=True, include_usage=False, t0=time.perf_counter(),
                                  metrics=metrics, timeout_s=10, keepalive_s=0.1, wire=wire)

    return Starlette(routes=[Route("/responses", responses, methods=["POST"])])


def _events(body: bytes) -> tuple[list[str], list[dict[str, Any]]]:
    """(the keep-alive comments, the events' data) of an SSE body."""
    comments, events = [], []
    for block in body.decode().strip().split("\n\n"):
        if block.startswith(":"):
            comments.append(block)
        else:
            events.append(orjson.loads(block.split("data: ", 1)[1]))
    return comments, events


@pytest.mark.parametrize("slow_then", ["slow_first"], indirect=True)
def test_keep_alives_then_the_full_sequence(slow_then: str) -> None:
    with LiveServer(_app(slow_then)) as gw:
        comments, events = _events(httpx.post(f"{gw.url}/responses", timeout=10).content)
    kinds = [e["type"] for e in events]
    assert comments and kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added"]
    assert kinds[4] == "response.output_text.delta" and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


@pytest.mark.parametrize("slow_then", ["stall_first"], indirect=True)
def test_a_failure_after_keep_alives_still_opens_then_fails(slow_then: str) -> None:
    """Headers went out with comments only: the client still gets the response it can fail."""
    with LiveServer(_app(slow_then)) as gw:
        r = httpx.post(f"{gw.url}/responses", timeout=10)
    comments, events = _events(r.content)
    kinds = [e["type"] for e in events]
    assert r.status_code == 200 and comments
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed" and "response.completed" not in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
