"""The dispatcher: one (method, path) table behind one declared middleware chain, every route on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import openai
import pytest
from live_server import LiveServer
from starlette.requests import Request
from starlette.responses import Response
from upstream_server import FakeUpstream

from blink.gateway.http.dispatch import Dispatcher, GatewayApp, Routes
from blink.gateway.http.edge_limits import ConcurrencyLimitMiddleware
from blink.gateway.http.errors import CatchAllMiddleware
from blink.obs.middleware import ObservabilityMiddleware
from blink.serve import build_app
from tests.gateway.gateway_helpers import gateway_settings

M = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def served(upstream: FakeUpstream) -> Iterator[tuple[GatewayApp, LiveServer]]:
    app = build_app(gateway_settings(upstream, max_concurrent_streams=1))
    with LiveServer(app) as server:
        yield app, server


def test_generation_endpoints_are_fixed_paths(served: tuple[GatewayApp, LiveServer]) -> None:
    """The hot paths are dict lookups, not template matches."""
    fixed = served[0].dispatcher.paths("POST")
    assert {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"} <= fixed


def test_the_chain_is_declared_once_outermost_first(served: tuple[GatewayApp, LiveServer]) -> None:
    app, _ = served
    chain: list[object] = []
    node: object = app.chain
    while node is not None:
        chain.append(node)
        node = getattr(node, "app", None)
    kinds = [type(n) for n in chain]
    assert kinds[0] is ObservabilityMiddleware
    assert kinds.index(CatchAllMiddleware) < kinds.index(ConcurrencyLimitMiddleware)
    assert chain[-1] is app.dispatcher


def test_streamed_generation(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="fake", messages=M, stream=True, max_tokens=3) if c.choices)  # fmt: skip
    assert text == " t0 t1 t2"


def test_generation_errors_stay_typed_json(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    bad = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    missing = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "nope", "messages": M})
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "model"


def test_concurrency_limit_applies(served: tuple[GatewayApp, LiveServer]) -> None:
    """The limit (1 here) counts streams: a second one while the first is open is a 503."""
    _, server = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(model="fake", messages=M, stream=True, user="tokens=200;delay=0.05")
    next(iter(stream))
    try:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="fake", messages=M, max_tokens=1)
        assert info.value.status_code == 503
        assert httpx.get(f"{server.url}/health").status_code == 200  # not a generation path: no slot
    finally:
        stream.close()


def test_unknown_path_and_wrong_method_are_json(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    wrong_method = httpx.get(f"{server.url}/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert wrong_method.headers["allow"] == "POST"
    unknown = httpx.post(f"{server.url}/v1/nowhere", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    head = httpx.head(f"{server.url}/health")  # GET routes answer GET only, as before
    assert head.status_code == 405


def test_templated_paths_get_their_parameters(served: tuple[GatewayApp, LiveServer]) -> None:
    _, server = served
    assert httpx.get(f"{server.url}/v1/models/fake").json()["id"] == "fake"
    slashed = httpx.get(f"{server.url}/v1/models/org/name")  # {model_id:path}: slashes kept
    assert slashed.status_code == 404
    assert "org/name" in slashed.json()["error"]["message"]
    gone = httpx.delete(f"{server.url}/v1/responses/resp_none")
    assert gone.status_code == 404
    assert httpx.put(f"{server.url}/v1/responses/resp_none").status_code == 405


def test_unknown_websocket_path_is_closed(served: tuple[GatewayApp, LiveServer]) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    _, server = served
    with pytest.raises(InvalidStatus) as info:  # closed before accept: the handshake is refused
        connect(f"ws://127.0.0.1:{server.port}/v1/nowhere").close()
    assert info.value.response.status_code == 403


def test_two_endpoints_for_one_route_are_refused() -> None:
    async def one(request: Request) -> Response:
        return Response()

    a, b = Routes(), Routes()
    a.get("/x")(one)
    b.get("/x")(one)
    with pytest.raises(ValueError, match="GET /x"):
        Dispatcher([a, b])


def test_a_failed_start_up_is_reported_to_the_server() -> None:
    @asynccontextmanager
    async def broken(app: GatewayApp) -> AsyncIterator[None]:
        raise RuntimeError("no backend")
        yield

    app = GatewayApp([], [], broken)
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    with pytest.raises(RuntimeError):
        asyncio.run(app({"type": "lifespan"}, receive, send))
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert "no backend" in str(sent[0]["message"])
