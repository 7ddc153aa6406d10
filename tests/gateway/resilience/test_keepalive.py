"""SSE keep-alive comments while a long first token is pending; errors after them are SSE events."""

from __future__ import annotations

import httpx
import pytest
from live_server import LiveServer
from slow_stream import PATH, slow_stream_app
from starlette.applications import Starlette

from blink.backends.base import GenerationRequest, SamplingOptions


def _app(base_url: str) -> Starlette:
    return slow_stream_app(base_url, lambda: GenerationRequest("r", "m", "chat", SamplingOptions(),
                                                               messages=[{"role": "user", "content": "hi"}]))


@pytest.mark.parametrize("slow_then", ["slow_first"], indirect=True)
def test_comments_flow_before_a_slow_first_token(slow_then: str) -> None:
    with LiveServer(_app(slow_then)) as gw:
        body = httpx.post(f"{gw.url}{PATH}", timeout=10).text
    head, _, rest = body.partition("data: ")
    assert head.count(": keep-alive\n\n") >= 2  # ~0.35 s / 0.1 s before the first event
    assert '" t0"' in rest and rest.rstrip().endswith("data: [DONE]")


@pytest.mark.parametrize("slow_then", ["stall_first"], indirect=True)
def test_failure_after_comments_is_an_explicit_sse_error(slow_then: str) -> None:
    with LiveServer(_app(slow_then)) as gw:
        r = httpx.post(f"{gw.url}{PATH}", timeout=10)
    assert r.status_code == 200 and r.text.startswith(": keep-alive")
    assert '"error"' in r.text and "[DONE]" not in r.text  # the read timeout ends it loudly
