"""ResponsesWire on the shared generation loop: the events around keep-alives, slow and failed first tokens."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from live_server import LiveServer
from slow_stream import PATH, slow_stream_app
from starlette.applications import Starlette

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.gateway.responses.http_response import ResponsesWire
from blink.gateway.responses.render import ResponseRenderer
from blink.protocol.responses import ResponsesRequest


def _app(base_url: str) -> Starlette:
    body = ResponsesRequest.model_validate({"model": "m", "input": "hi", "stream": True})
    return slow_stream_app(
        base_url, lambda: GenerationRequest("resp_1", "m", "chat", SamplingOptions(),
                                            messages=[{"role": "user", "content": "hi"}]),
        lambda req: ResponsesWire(ResponseRenderer("resp_1", "m", body, [], "auto"), None))


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
        comments, events = _events(httpx.post(f"{gw.url}{PATH}", timeout=10).content)
    kinds = [e["type"] for e in events]
    assert comments and kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added"]
    assert kinds[4] == "response.output_text.delta" and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


@pytest.mark.parametrize("slow_then", ["stall_first"], indirect=True)
def test_a_failure_after_keep_alives_still_opens_then_fails(slow_then: str) -> None:
    """Headers went out with comments only: the client still gets the response it can fail."""
    with LiveServer(_app(slow_then)) as gw:
        r = httpx.post(f"{gw.url}{PATH}", timeout=10)
    comments, events = _events(r.content)
    kinds = [e["type"] for e in events]
    assert r.status_code == 200 and comments
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed" and "response.completed" not in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
