"""Async mode: the check runs after the last byte (proved by ordering), and flagged answers never cache."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from asgi_parts import read_body, serve_lifespan
from live_server import LiveServer
from safety_helpers import safety_settings
from scripted_upstream import ScriptedUpstream

from blink.gateway.app import create_app
from blink.gateway.front import GatewayFront
from blink.gateway.front_builder import build_response_cache
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.safety.checks import SafetyPipeline, Verdict
from blink.gateway.safety.stage import SafetyStage
from blink.serve import build_app, build_registry


class GatedCheck:
    """A check that cannot finish until the test opens the gate, recording when it ran."""

    name = "gated"
    thresholds = {"gated": 1.0}

    def __init__(self) -> None:
        self.events: list[str] = []
        self.gate = threading.Event()

    async def check(self, text: str) -> Verdict:
        self.events.append("check_started")
        await asyncio.to_thread(self.gate.wait, 10)
        self.events.append("check_done")
        return Verdict(flagged=True, categories={"gated"})


class WebhookSink:
    """A real HTTP receiver for the flag reports."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        body = await read_body(receive)
        self.reports.append(orjson.loads(body))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _wait(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _ask(client: openai.OpenAI, prompt: str, stream: bool = False) -> tuple[str, str]:
    msgs = [{"role": "user", "content": prompt}]
    if stream:
        with client.chat.completions.with_streaming_response.create(model="fake", messages=msgs, stream=True,
                                                                    temperature=0) as raw:  # fmt: skip
            body = "".join(raw.iter_text())
            return body, raw.headers["x-blink-cache"]
    raw = client.chat.completions.with_raw_response.create(model="fake", messages=msgs, temperature=0)
    return raw.parse().choices[0].message.content or "", raw.headers["x-blink-cache"]


def test_the_response_is_complete_before_the_check_can_finish(scripted: ScriptedUpstream) -> None:
    settings = safety_settings(scripted, cache={"exact": {"enabled": True}, "store": "memory"})
    gated = GatedCheck()
    stage = SafetyStage(SafetyPipeline([gated]), "async")
    cache = build_response_cache(settings.cache)
    registry = build_registry(settings)
    app = create_app(registry, settings.server, GenerationPipeline(registry, GatewayFront(cache, None, stage)))
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        body, cache_outcome = _ask(client, "say: One. Two. Three.", stream=True)
        gated.events.append("client_received_last_byte")
        assert body.rstrip().endswith("data: [DONE]") and cache_outcome == "miss"
        # The whole stream arrived while the check was gated: it cannot have been on the path.
        assert "check_done" not in gated.events
        gated.gate.set()
        _wait(lambda: stage.counters.checked == 1)
        assert gated.events.index("client_received_last_byte") < gated.events.index("check_done")
        assert stage.counters.flagged == 1
        # Flagged (by the gated check): the same request is a miss again, never replayed.
        _, again = _ask(client, "say: One. Two. Three.", stream=True)
        assert again == "miss"


@pytest.fixture(scope="module")
def sink() -> Iterator[tuple[WebhookSink, str]]:
    s = WebhookSink()
    with LiveServer(s) as server:
        yield s, f"{server.url}/flagged"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedUpstream, sink: tuple[WebhookSink, str]) -> Iterator[LiveServer]:
    settings = safety_settings(scripted, cache={"exact": {"enabled": True}, "store": "memory"},
                               safety={"enabled": True, "blocklist": ["forbidden fruit"], "webhook": sink[1]})  # fmt: skip
    app = build_app(settings)
    with LiveServer(app) as server:
        server.stage = app.state.front.safety  # type: ignore[attr-defined]
        yield server


def _checked(gateway: LiveServer) -> int:
    return gateway.stage.counters.checked  # type: ignore[attr-defined]


@pytest.mark.parametrize("stream", [False, True])
def test_flagged_answers_never_enter_the_cache(gateway: LiveServer, sink: tuple[WebhookSink, str], stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
    prompt = f"say: Sure. The forbidden_fruit grows here ({stream})."
    before = _checked(gateway)
    text, outcome = _ask(client, prompt, stream)
    assert "forbidden" in text and "fruit" in text and outcome == "miss"  # async mode delivers, then judges
    _wait(lambda: _checked(gateway) == before + 1)
    _, again = _ask(client, prompt, stream)
    assert again == "miss"
    _wait(lambda: any(f"({stream})" in r["output"][0] and r["categories"] == ["blocklist"] for r in sink[0].reports))
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'blink_safety_flagged_total{category="blocklist"}' in metrics and "blink_safety_checked_total" in metrics


def test_clean_answers_are_cached_and_answers_with_pii_are_not(gateway: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)
    before = _checked(gateway)
    assert _ask(client, "say: Apples are red.")[1] == "miss"
    assert _ask(client, "say: Mail jane.doe@example.com please.")[1] == "miss"
    _wait(lambda: _checked(gateway) == before + 2)

    def clean_answer_cached() -> bool:  # its fill is a background task of its own: ask until it lands
        time.sleep(0.05)
        return _ask(client, "say: Apples are red.")[1] == "exact"

    _wait(clean_answer_cached)
    assert _ask(client, "say: Mail jane.doe@example.com please.")[1] == "miss"
