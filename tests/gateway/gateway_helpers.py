"""Gateways whose one model ("fake") is the test upstream: their settings, and one served."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import CacheSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.http.dispatch import GatewayApp
from blink.serve import build_app


def _fake_model(upstream: FakeUpstream) -> OpenAIHTTPModel:
    return OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)


def gateway_settings(upstream: FakeUpstream, **server: Any) -> Settings:
    return Settings(server=ServerSettings(**server), models=[_fake_model(upstream)])


def cached_settings(upstream: FakeUpstream, cache: dict[str, Any], **extra: Any) -> Settings:
    """``cache``: the ``cache`` section; ``extra``: other sections (``server`` too)."""
    extra.setdefault("server", ServerSettings())
    return Settings(models=[_fake_model(upstream)], cache=CacheSettings.model_validate(cache), **extra)


@contextmanager
def serving(settings: Settings) -> Iterator[tuple[LiveServer, GatewayApp]]:
    """The gateway ``settings`` describe, on a free port; the server and its app."""
    app = build_app(settings)
    with LiveServer(app) as server:
        yield server, app
