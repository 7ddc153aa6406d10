"""Settings for a gateway whose one model ("fake") is the test upstream."""

from __future__ import annotations

from typing import Any

from upstream_server import FakeUpstream

from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings


def gateway_settings(upstream: FakeUpstream, **server: Any) -> Settings:
    return Settings(
        server=ServerSettings(**server),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
    )
