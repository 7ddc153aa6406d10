"""A gateway with the response cache on, in front of the shared fake upstream."""

from __future__ import annotations

import asyncio
import time
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


def cache_settings(upstream: FakeUpstream, cache: dict[str, Any], **extra: Any) -> Settings:
    return Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        cache=CacheSettings.model_validate(cache),
        **extra,
    )


@contextmanager
def cached_gateway(settings: Settings) -> Iterator[tuple[LiveServer, GatewayApp]]:
    app = build_app(settings)
    with LiveServer(app) as server:
        yield server, app


def wait_entries(app: GatewayApp, n: int, timeout: float = 5.0) -> None:
    """Fills run in the background: wait until the store holds ``n`` entries."""
    store = app.state.front.cache.store
    deadline = time.monotonic() + timeout
    while asyncio.run(store.stats()).entries < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"cache did not reach {n} entries")
        time.sleep(0.01)
