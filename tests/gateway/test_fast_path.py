"""GatewayApp: generation POSTs enter Blink's own middleware directly; the rest keeps FastAPI's stack."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from gateway_helpers import gateway_settings
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.gateway.fast_path import GatewayApp
from blink.obs.middleware import ObservabilityMiddleware
from blink.serve import build_app

M = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def served(upstream: FakeUpstream) -> Iterator[tuple[GatewayApp, LiveServer]]:
    app = build_app(gateway_settings(upstream, max_concurrent_streams=1))
    assert isinstance(app, GatewayApp)
    with LiveServer(app) as server:
        yield app, server


def test_hot_paths_are_the_generation_endpoints(served: tuple[GatewayApp, LiveServer]) -> None:
    app, _ = served
    assert {"/v1/chat/completions", "/v1/completions"} <= app.hot_paths


def test_the_own_chain_is_the_built_stacks_outermost_user_middleware(served: tuple[GatewayApp, LiveServer]) -> None:
    """Same instances as the full stack's (shared state), not a second copy of the middleware."""
    app, _ = served
    own = app._find_own_stack()
    assert type(own) is ObservabilityMiddleware
    node: object = app.middleware_stack
    chain = []
    while node is not None:
        chain.append(node)
        node = getattr(node, "app", None)
    assert any(n is own for n in chain)
    assert chain.index(own) > 0  # FastAPI's own layers sit outside it and are skipped


def test_streamed_generation_over_the_hot_path(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="fake", messages=M, stream=True, max_tokens=3) if c.choices)  # fmt: skip
    assert text == " t0 t1 t2"


def test_hot_path_errors_stay_typed_json(served: tuple[GatewayApp, LiveServer]) -> None:
    """Without FastAPI's outer layers a bad body and an unknown model are still OpenAI errors."""
    _, server = served
    bad = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    missing = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "nope", "messages": M})
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "model"


def test_concurrency_count_is_shared_with_the_full_stack(served: tuple[GatewayApp, LiveServer]) -> None:
    """The limit (1 here) counts hot-path streams: a second one while the first is open is a 503."""
    _, server = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(model="fake", messages=M, stream=True, user="tokens=200;delay=0.05")
    next(iter(stream))
    try:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="fake", messages=M, max_tokens=1)
        assert info.value.status_code == 503
    finally:
        stream.close()


def test_other_requests_keep_fastapis_stack(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == "fake"
    wrong_method = httpx.get(f"{server.url}/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    unknown = httpx.post(f"{server.url}/v1/nowhere", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
