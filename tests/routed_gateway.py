"""A real gateway serving one routed model ("auto") over real upstreams, and a streaming client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from live_server import LiveServer

from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app

FULL = "".join(f" t{k}" for k in range(8))


def routed_settings(tiers: list[dict[str, Any]], urls: dict[str, str], **route: Any) -> Settings:
    """Models named after ``urls`` (each an openai_http upstream) and one route "auto" over them."""
    models = [
        OpenAIHTTPModel(name=name, kind="openai_http", base_url=url, connect_timeout_s=2, read_timeout_s=30)
        for name, url in urls.items()
    ]
    defaults: dict[str, Any] = {"first_token_timeout_s": 0.5, "stall_timeout_s": 0.5}
    return Settings(
        server=ServerSettings(request_timeout_s=20),
        models=models,
        routes=[{"name": "auto", "tiers": tiers, **defaults, **route}],
    )


@contextmanager
def routed_gateway(tiers: list[dict[str, Any]], urls: dict[str, str], **route: Any) -> Iterator[LiveServer]:
    with LiveServer(build_app(routed_settings(tiers, urls, **route))) as server:
        yield server


def client(server: LiveServer) -> openai.OpenAI:
    # No client-side retries: every failure must be visible to the test.
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0, timeout=15)


def stream_chat(c: openai.OpenAI, **extra: Any) -> tuple[str, str | None]:
    """The streamed text and the finish reason; raises what the openai client raises."""
    text, finish = "", None
    stream = c.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hello"}], stream=True, **extra
    )
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish
