"""A real upstream and a real gateway in front of it, with observability sinks a test can read."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import ObsSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.obs.request_log import RequestLogger
from blink.serve import build_app


@pytest.fixture(scope="session")
def obs_upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=8)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


@pytest.fixture(scope="session")
def log_buffer() -> io.StringIO:
    return io.StringIO()


@pytest.fixture(scope="session")
def obs_gateway(obs_upstream: FakeUpstream, log_buffer: io.StringIO) -> Iterator[LiveServer]:
    settings = Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=obs_upstream.base_url, read_timeout_s=30)],
        obs=ObsSettings(request_log="off", log_prompts=True),
    )
    app = build_app(settings)
    # The same logger the settings would build, writing where the test can read it.
    app.state.obs.request_log = RequestLogger(log_buffer, log_prompts=True)
    with LiveServer(app) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_upstream(obs_upstream: FakeUpstream) -> None:
    obs_upstream.defaults = {"tokens": 8, "delay": 0.0}
