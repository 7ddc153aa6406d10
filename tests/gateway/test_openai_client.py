"""End to end over real sockets: the real ``openai`` client -> gateway -> real upstream."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

TOKENS = "".join(f" t{k}" for k in range(8))


@pytest.fixture
def client(gateway: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)


@pytest.fixture
def aclient(gateway: LiveServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="x", max_retries=0)


MSG = [{"role": "user", "content": "hi"}]


def test_chat_non_stream(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="fake", messages=MSG)
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content == TOKENS
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.completion_tokens == 8


def test_chat_stream_role_finish_and_usage(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="fake", messages=MSG, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TOKENS
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="fake", messages=MSG, stream=True))
    assert all(c.choices for c in chunks)


def test_chat_n2_and_max_tokens(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="fake", messages=MSG, n=2, max_completion_tokens=3)
    assert [c.index for c in resp.choices] == [0, 1]
    assert all(c.message.content == " t0 t1 t2" and c.finish_reason == "length" for c in resp.choices)


def test_chat_stream_n2(client: openai.OpenAI) -> None:
    texts = {0: "", 1: ""}
    roles = set()
    for chunk in client.chat.completions.create(model="fake", messages=MSG, n=2, stream=True, max_tokens=4):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.delta.role:
                roles.add(choice.index)
    assert texts == {0: " t0 t1 t2 t3", 1: " t0 t1 t2 t3"} and roles == {0, 1}


def test_chat_logprobs_pass_through(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="fake", messages=MSG, logprobs=True, top_logprobs=2, max_tokens=2)
    content = resp.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [lp.token for lp in content] == [" t0", " t1"]
    assert content[0].logprob == -0.25 and len(content[0].top_logprobs) == 2
    stream = client.chat.completions.create(
        model="fake", messages=MSG, logprobs=True, top_logprobs=1, max_tokens=2, stream=True
    )
    tokens = [lp.token for c in stream for ch in c.choices if ch.logprobs for lp in ch.logprobs.content or []]
    assert tokens == [" t0", " t1"]


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    resp = client.completions.create(model="fake", prompt="say", max_tokens=3, logprobs=1)
    assert resp.choices[0].text == " t0 t1 t2" and resp.choices[0].finish_reason == "length"
    assert resp.choices[0].logprobs.tokens == [" t0", " t1", " t2"]  # type: ignore[union-attr]
    chunks = list(
        client.completions.create(
            model="fake", prompt="say", max_tokens=3, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " t0 t1 t2"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_headers_and_raw_sse_format(gateway: LiveServer) -> None:
    body = {"model": "fake", "messages": MSG, "stream": True, "max_tokens": 2}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-blink-backend"] == "fake"
        assert float(resp.headers["x-blink-ttft-ms"]) >= 0
        raw = resp.read()
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    assert all(e.startswith(b"data: {") for e in events[:-2])


async def test_async_client_stream_and_not(aclient: openai.AsyncOpenAI) -> None:
    resp = await aclient.chat.completions.create(model="fake", messages=MSG)
    assert resp.choices[0].message.content == TOKENS
    stream = await aclient.chat.completions.create(model="fake", messages=MSG, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert text == TOKENS
    results = await asyncio.gather(
        *(aclient.chat.completions.create(model="fake", messages=MSG, max_tokens=2) for _ in range(8))
    )
    assert all(r.choices[0].message.content == " t0 t1" for r in results)


def test_models_health_ready_metrics(client: openai.OpenAI, gateway: LiveServer) -> None:
    assert [m.id for m in client.models.list().data] == ["fake"]
    assert httpx.get(f"{gateway.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/ready")
    assert ready.status_code == 200 and ready.json()["backends"]["fake"]["ok"]
    metrics = httpx.get(f"{gateway.url}/metrics")
    assert metrics.status_code == 200 and "blink_requests_total" in metrics.text


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=MSG)
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"  # type: ignore[index]


def test_upstream_4xx_passed_on(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="fake", messages=MSG, user="fail=400")
    body = info.value.body
    assert body["param"] == "temperature" and body["code"] == "bad_value"  # type: ignore[index]
    assert body["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(openai.RateLimitError) as rl:
        client.chat.completions.create(model="fake", messages=MSG, user="fail=429", stream=True)
    assert rl.value.response.headers["retry-after"] == "2"


def test_upstream_5xx_is_typed(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="fake", messages=MSG, user="fail=500", stream=True)
    assert info.value.status_code == 502 and info.value.body["type"] == "upstream_error"  # type: ignore[index]
    with pytest.raises(openai.InternalServerError) as unavailable:
        client.chat.completions.create(model="fake", messages=MSG, user="fail=503")
    assert unavailable.value.status_code == 503


def test_mid_stream_failures_end_with_error_event(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    for directive in ("cut=3", "error_after=3"):
        stream = client.chat.completions.create(model="fake", messages=MSG, stream=True, user=directive)
        seen = ""
        with pytest.raises(openai.APIError):
            for chunk in stream:
                seen += chunk.choices[0].delta.content or "" if chunk.choices else ""
        assert seen == " t0 t1 t2"
