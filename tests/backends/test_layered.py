"""Stream middleware on the seam: ``with_middleware`` order and ``LayeredServer``'s lifecycle,
around a real OpenAIHTTPBackend talking to a real local upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import (
    Delta,
    GenerationRequest,
    ModelServer,
    SamplingOptions,
    StreamFn,
    StreamMiddleware,
    StreamSource,
    with_middleware,
)
from blink.backends.layered import LayeredServer
from blink.backends.openai_http import OpenAIHTTPBackend


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    fake = FakeUpstream(tokens=3)
    with LiveServer(fake) as server:
        fake.base_url = f"{server.url}/v1"
        yield fake


def tag(label: str, seen: list[str]) -> StreamMiddleware:
    """A middleware that records its call order and appends ``label`` to every text delta."""

    def middleware(inner: StreamFn) -> StreamFn:
        async def stream(req: GenerationRequest) -> AsyncIterator[Delta]:
            seen.append(label)
            async for d in inner(req):
                if d.text:
                    d.text += label
                yield d

        return stream

    return middleware


def chat() -> GenerationRequest:
    msgs = [{"role": "user", "content": "hi"}]
    return GenerationRequest("r1", "m", "chat", SamplingOptions(), messages=msgs)


async def test_first_listed_middleware_is_outermost(up: FakeUpstream) -> None:
    server = OpenAIHTTPBackend("up", up.base_url)
    seen: list[str] = []
    source = with_middleware(server, tag("A", seen), tag("B", seen))
    assert isinstance(source, StreamSource) and not isinstance(source, ModelServer)  # no health/load to fake
    assert source.name == "up"
    texts = [d.text async for d in source.stream(chat()) if d.text]
    assert seen == ["A", "B"]
    assert texts == [" t0BA", " t1BA", " t2BA"]  # B wraps the server, A wraps B
    await server.aclose()


async def test_layered_server_is_the_inner_server_with_its_stream_wrapped(up: FakeUpstream) -> None:
    inner = OpenAIHTTPBackend("up", up.base_url)
    seen: list[str] = []
    server = LayeredServer(inner, tag("!", seen))
    assert isinstance(server, ModelServer)
    await server.start()
    assert server.name == "up" and [c.id for c in server.models()] == ["up"]
    assert (await server.health()).ok
    text = "".join([d.text async for d in server.stream(chat())])
    assert text == " t0! t1! t2!" and seen == ["!"]
    assert server.load().running == 0
    await server.aclose()
    assert inner._client is None  # closing the layered server closed the one it owns
