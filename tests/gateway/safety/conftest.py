"""A scripted upstream (it says what the prompt asks) behind gateways with the safety filter on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from live_server import LiveServer
from scripted_upstream import ScriptedUpstream


@pytest.fixture(scope="session")
def scripted() -> Iterator[ScriptedUpstream]:
    up = ScriptedUpstream()
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up
