"""Backend failures at every point of a request become JSON errors or SSE error events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
from live_server import LiveServer

from blink.backends.base import Delta, GenerationRequest, Health, Load, ModelCard
from blink.backends.registry import BackendRegistry
from blink.config.server import ServerSettings
from blink.gateway.app import create_app
from blink.protocol.errors import ContextLengthExceededError

M = [{"role": "user", "content": "hi"}]


class ScriptedBackend:
    """A real in-process backend whose behaviour is picked by the request's model name."""

    name = "scripted"

    def __init__(self) -> None:
        self.started = self.closed = False

    def models(self) -> list[ModelCard]:
        return [ModelCard(id="ctx", max_model_len=32)]

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        if req.model == "ctx":
            raise ContextLengthExceededError(
                "This model's maximum context length is 32 tokens.", param="messages"
            )
        if req.model == "boom-early":
            raise RuntimeError("kaput")
        if req.model == "slow":
            import asyncio

            await asyncio.sleep(5)
        yield Delta(index=0, text="one")
        if req.model == "boom-late":
            raise RuntimeError("kaput later")
        yield Delta(index=0, text=" two", finish_reason="stop")

    async def health(self) -> Health:
        return Health(ok=False, detail="warming up")

    def load(self) -> Load:
        return Load()

    async def start(self) -> None:
        self.started = True

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[LiveServer, ScriptedBackend]]:
    backend = ScriptedBackend()
    registry = BackendRegistry()
    for name in ("ctx", "boom-early", "boom-late", "ok", "slow"):
        registry.add(name, backend)
    with LiveServer(create_app(registry, ServerSettings(request_timeout_s=1.0))) as server:
        assert backend.started
        yield server, backend
    assert backend.closed


@pytest.fixture
def client(scripted: tuple[LiveServer, ScriptedBackend]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{scripted[0].url}/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_context_length_is_400(client: openai.OpenAI, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="ctx", messages=M, stream=stream)
    assert info.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert info.value.body["param"] == "messages"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
def test_unexpected_error_before_first_token_is_json_500(client: openai.OpenAI, stream: bool) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="boom-early", messages=M, stream=stream)
    assert info.value.status_code == 500 and info.value.body["type"] == "server_error"  # type: ignore[index]


def test_unexpected_error_mid_stream_is_an_error_event(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="boom-late", messages=M, stream=True)
    seen = []
    with pytest.raises(openai.APIError, match="mid-stream"):
        for chunk in stream:
            seen.append(chunk.choices[0].delta.content)
    assert seen == ["one"]


def test_request_timeout_is_504(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="slow", messages=M, stream=True)
    assert info.value.status_code == 504


def test_ok_and_not_ready(client: openai.OpenAI, scripted: tuple[LiveServer, ScriptedBackend]) -> None:
    resp = client.chat.completions.create(model="ok", messages=M)
    assert resp.choices[0].message.content == "one two"
    ready = httpx.get(f"{scripted[0].url}/ready")
    assert ready.status_code == 503 and ready.json()["backends"]["scripted"]["detail"] == "warming up"
    models = {m.id for m in client.models.list().data}
    assert models == {"ctx", "boom-early", "boom-late", "ok", "slow"}
