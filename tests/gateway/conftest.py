"""A real upstream and a real gateway (openai_http backend in front of it), both on sockets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_upstream import FaultUpstream
from gateway_helpers import gateway_settings
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.serve import build_app


@pytest.fixture
def slow_then(request: pytest.FixtureRequest) -> Iterator[str]:
    """An upstream whose first token is slow or never comes (``request.param``: FaultUpstream's
    fault), for slow_stream.py's app; its base URL."""
    with LiveServer(FaultUpstream(tokens=4, fault=request.param, slow_s=0.35)) as server:
        yield f"{server.url}/v1"


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=8)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


@pytest.fixture(scope="session")
def gateway(upstream: FakeUpstream) -> Iterator[LiveServer]:
    with LiveServer(build_app(gateway_settings(upstream, max_tokens_limit=4096))) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_upstream(upstream: FakeUpstream) -> None:
    upstream.defaults = {"tokens": 8, "delay": 0.0}
    upstream.cancelled_event.clear()
