"""A gateway built from settings, served on a free port for the module (pre-computation tests)."""

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


def upstream_settings(upstream: FakeUpstream, cache: dict[str, Any], **extra: Any) -> Settings:
    extra.setdefault("server", ServerSettings())
    return Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        cache=CacheSettings.model_validate(cache),
        **extra,
    )


@contextmanager
def serving(settings: Settings) -> Iterator[tuple[LiveServer, GatewayApp]]:
    app = build_app(settings)
    with LiveServer(app) as server:
        yield server, app
