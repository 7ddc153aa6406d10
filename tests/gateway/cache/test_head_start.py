"""Head start (``cache.semantic.head_start``): the backend call opens during the semantic lookup,
a miss streams from it, a hit cancels it; real gateway, real upstream, real embedder."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from cache_helpers import cache_entries, wait_entries
from gateway_helpers import cached_settings, serving
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.gateway.cache.head_start import HeadStart


@pytest.fixture(scope="module")
def head_start(upstream: FakeUpstream, onnx_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Any]]:
    settings = cached_settings(upstream, {
        "exact": {"enabled": True},
        "semantic": {"enabled": True, "onnx_dir": str(onnx_dir), "head_start": True},
        "path": str(tmp_path_factory.mktemp("head-start") / "cache.db"),
    })
    with serving(settings) as gw:
        yield gw


def _ask(server: LiveServer, question: str) -> httpx.Response:
    body = {"model": "fake", "messages": [{"role": "user", "content": question}], "temperature": 0}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)


def _wait(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_miss_streams_from_the_started_call_and_fills(head_start: tuple[LiveServer, Any], upstream: FakeUpstream) -> None:
    server, app = head_start
    before, calls = cache_entries(app), len(upstream.requests)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="fake", messages=[{"role": "user", "content": "Which terminal do flights to Oslo leave from?"}],
        temperature=0, stream=True,
    ) as resp:
        assert resp.headers["x-blink-cache"] == "miss"
        text = "".join(c.choices[0].delta.content or "" for c in resp.parse() if c.choices)
    assert text == "".join(f" t{k}" for k in range(8))
    assert len(upstream.requests) == calls + 1  # one call: the started one was used, not a second
    wait_entries(app, before + 1)


def test_semantic_hit_cancels_the_started_call(head_start: tuple[LiveServer, Any], upstream: FakeUpstream) -> None:
    server, app = head_start
    before = cache_entries(app)
    assert _ask(server, "How do I reset my router password?").headers["x-blink-cache"] == "miss"
    wait_entries(app, before + 1)
    upstream.defaults["stall"] = 1  # a started call would never finish on its own
    question = "How can I reset my router password?"

    def ours(requests: list[dict[str, Any]]) -> int:
        # The upstream is shared by the whole session: count only this question's calls, since
        # another test's straggler may be cut or finish while this one waits.
        return sum(1 for r in requests if r.get("messages", [{}])[-1].get("content") == question)

    resp = _ask(server, question)
    assert resp.headers["x-blink-cache"] == "semantic"
    assert resp.json()["choices"][0]["message"]["content"].startswith(" t0")
    # The call may be cut before it reached the upstream; if it did reach it, it was cancelled.
    _wait(lambda: ours(upstream.requests) == ours(upstream.cancelled_requests))
    assert ours(upstream.completed_requests) == 0


def test_exact_hit_starts_nothing(head_start: tuple[LiveServer, Any], upstream: FakeUpstream) -> None:
    server, app = head_start
    before = cache_entries(app)
    assert _ask(server, "What is the baggage allowance on a domestic flight?").headers["x-blink-cache"] == "miss"
    wait_entries(app, before + 1)
    calls = len(upstream.requests)
    assert _ask(server, "What is the baggage allowance on a domestic flight?").headers["x-blink-cache"] == "exact"
    time.sleep(0.1)
    assert len(upstream.requests) == calls


def test_discard_cuts_a_call_the_upstream_is_serving(upstream: FakeUpstream) -> None:
    upstream.defaults["stall"] = 1

    async def run() -> None:
        backend = OpenAIHTTPBackend("fake", upstream.base_url)
        await backend.start()
        calls, cancelled = len(upstream.requests), upstream.cancelled
        req = GenerationRequest("r1", "fake", "chat", SamplingOptions(),
                                messages=[{"role": "user", "content": "hi"}])
        head = HeadStart(backend, req)
        while len(upstream.requests) == calls:  # the request was sent while we did other work
            await asyncio.sleep(0.005)
        await head.discard()
        await asyncio.to_thread(upstream.cancelled_event.wait, 5)
        assert upstream.cancelled == cancelled + 1
        await backend.aclose()

    asyncio.run(run())


def test_failed_lookup_cancels_the_started_call(upstream: FakeUpstream, onnx_dir: Path,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """The embedder times out (a 1 us queue timeout: every input is already late): the client gets
    the typed 504, and the call the head start opened is cut, not left running."""
    from blink.config.model_server import ModelServerSettings

    settings = cached_settings(upstream, {
        "semantic": {"enabled": True, "onnx_dir": str(onnx_dir), "head_start": True},
        "path": str(tmp_path_factory.mktemp("head-start-fail") / "cache.db"),
    }, model_server=ModelServerSettings(timeout_s=1e-6))
    upstream.defaults["stall"] = 1
    calls, cancelled = len(upstream.requests), upstream.cancelled
    with serving(settings) as (server, _):
        resp = _ask(server, "Where can I find the nearest pharmacy?")
        assert resp.status_code == 504
        assert resp.json()["error"]["type"] == "timeout"
        _wait(lambda: len(upstream.requests) - calls == upstream.cancelled - cancelled)
