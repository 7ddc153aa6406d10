"""Anthropic's Messages API end to end, with the real ``anthropic`` SDK against a real gateway.

One gateway (keys on) serves a tiny random embedded model, a fake OpenAI upstream (what the
translation sends it), an upstream that serves /v1/messages itself (passed through) and a fault
upstream that fails mid-stream. Random weights still call a tool
when ``tool_choice`` forces it: the grammar engine constrains the output.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic_upstream import COUNT, AnthropicUpstream
from fault_upstream import FaultUpstream
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings, CacheSettings, ExactCacheSettings
from blink.config.models import EmbeddedModel, OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore
from blink.serve import build_app

pytest.importorskip("blink.engine.structured")

FORECAST = {"name": "forecast", "description": "Weather forecast.", "input_schema": {
    "type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                     "hourly": {"type": "boolean"}},
    "required": ["unit", "hourly"], "additionalProperties": False}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]
BODY_LIMIT = 200_000
# The SDK dropped its sampling arguments; the API still takes them (extra_body sends them).
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def keys_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keys") / "keys.db"


@pytest.fixture(scope="module")
def secret(keys_db: Path) -> str:
    return ApiKeyStore(keys_db).create("acme")[1]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


@pytest.fixture(scope="module")
def native() -> Iterator[tuple[AnthropicUpstream, str]]:
    up = AnthropicUpstream()
    with LiveServer(up) as server:
        yield up, f"{server.url}/v1"


@pytest.fixture(scope="module")
def url(tiny_qwen2: Path, fake: FakeUpstream, native: tuple[AnthropicUpstream, str], keys_db: Path) -> Iterator[str]:
    broken = FaultUpstream(fault="error_mid")
    with LiveServer(broken) as up:
        settings = Settings(
            server=ServerSettings(max_concurrent_streams=8, max_body_bytes=BODY_LIMIT),
            models=[EmbeddedModel(name="tiny", kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                                  max_model_len=2048),
                    OpenAIHTTPModel(name="fake", kind="openai_http", base_url=fake.base_url),
                    OpenAIHTTPModel(name="broken", kind="openai_http", base_url=f"{up.url}/v1"),
                    OpenAIHTTPModel(name="native", kind="openai_http", base_url=native[1], upstream_model="up-model",
                                  native_apis=["messages"])],
            auth=AuthSettings(enabled=True, keys_db=str(keys_db)),
        )
        with LiveServer(build_app(settings)) as server:
            yield server.url


def _client(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def _post(url: str, key: str, body: Any, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                      timeout=60)


def test_create_text(url: str, secret: str) -> None:
    msg = _client(url, secret).messages.create(model="tiny", max_tokens=8, system="Be brief.", messages=ASK,  # type: ignore[arg-type]
                                               extra_body=GREEDY)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "tiny" and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text  # type: ignore[union-attr]
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.stop_sequence is None
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 0
    assert 0 < msg.usage.output_tokens <= 8


def test_final_assistant_turn_is_continued(url: str, secret: str) -> None:
    prefill = [*ASK, {"role": "assistant", "content": "It is"}]
    msg = _client(url, secret).messages.create(model="tiny", max_tokens=4, messages=prefill, extra_body=GREEDY)  # type: ignore[arg-type]
    assert msg.content and msg.usage.output_tokens > 0


def test_cache_hits_replay_as_messages(fake: FakeUpstream) -> None:
    settings = Settings(models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=fake.base_url)],
                        cache=CacheSettings(exact=ExactCacheSettings(enabled=True), store="memory"))
    with LiveServer(build_app(settings)) as server:
        client = _client(server.url, "unused")
        ask = [{"role": "user", "content": "cache me"}]
        first = client.messages.with_raw_response.create(model="fake", max_tokens=3, messages=ask, extra_body=GREEDY)  # type: ignore[arg-type]
        again = client.messages.with_raw_response.create(model="fake", max_tokens=3, messages=ask, extra_body=GREEDY)  # type: ignore[arg-type]
        with client.messages.stream(model="fake", max_tokens=3, messages=ask, extra_body=GREEDY) as s:  # type: ignore[arg-type]
            streamed = s.get_final_message()
        stopped = [client.messages.with_raw_response.create(model="fake", max_tokens=3, messages=ask,  # type: ignore[arg-type]
                                                            stop_sequences=["zz"], extra_body=GREEDY) for _ in range(2)]
    assert again.headers["x-blink-cache"] == "exact"
    assert again.parse().content == first.parse().content
    assert streamed.content[0].text == first.parse().content[0].text  # type: ignore[union-attr]
    assert again.parse().usage.cache_read_input_tokens == first.parse().usage.input_tokens
    assert [r.headers.get("x-blink-cache") for r in stopped] == ["bypass", "bypass"]  # a replay cannot name the stop


def test_stream_events_and_text(url: str, secret: str) -> None:
    with _client(url, secret).messages.stream(model="tiny", max_tokens=8, messages=ASK, extra_body=GREEDY) as s:  # type: ignore[arg-type]
        events = [e.type for e in s]
        final = s.get_final_message()
    raw = [e for e in events if e in ("message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop")]
    assert raw[0] == "message_start" and raw[-2:] == ["message_delta", "message_stop"]
    assert raw[1] == "content_block_start" and raw[-3] == "content_block_stop" and "content_block_delta" in raw
    whole = _client(url, secret).messages.create(model="tiny", max_tokens=8, messages=ASK, extra_body=GREEDY)  # type: ignore[arg-type]
    assert final.content[0].text == whole.content[0].text  # type: ignore[union-attr]  # greedy: same answer
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequence_is_reported(url: str, secret: str) -> None:
    client = _client(url, secret)
    text = client.messages.create(model="tiny", max_tokens=24, messages=ASK, extra_body=GREEDY).content[0].text  # type: ignore[arg-type,union-attr]
    cut = next((i for i in range(len(text) // 2, len(text) - 1) if text[i:i + 2].strip()), None)
    if cut is None:
        pytest.skip(f"the greedy answer has no usable stop string: {text!r}")
    stop = text[cut:cut + 2]
    msg = client.messages.create(model="tiny", max_tokens=24, messages=ASK, extra_body=GREEDY,  # type: ignore[arg-type]
                                 stop_sequences=[stop])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert msg.content[0].text == text[:text.index(stop)]  # type: ignore[union-attr]


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "forecast"}, {"type": "any"}])
def test_forced_tool_round_trip(url: str, secret: str, choice: dict[str, Any]) -> None:
    client = _client(url, secret)
    msg = client.messages.create(model="tiny", max_tokens=1000, messages=ASK, tools=[FORECAST],  # type: ignore[arg-type]
                                 tool_choice=choice, extra_body=GREEDY)  # type: ignore[arg-type]
    assert msg.stop_reason == "tool_use"
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) >= 1 and calls[0].name == "forecast"
    assert calls[0].input["unit"] in ("celsius", "fahrenheit") and isinstance(calls[0].input["hourly"], bool)  # type: ignore[index]
    results = [{"type": "tool_result", "tool_use_id": c.id, "content": "12 C, clear"} for c in calls]
    follow = client.messages.create(
        model="tiny", max_tokens=6, tools=[FORECAST],  # type: ignore[arg-type]
        messages=[*ASK, {"role": "assistant", "content": msg.content}, {"role": "user", "content": results}])  # type: ignore[list-item]
    assert follow.type == "message" and follow.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_forced_tool_streamed_as_input_json(url: str, secret: str) -> None:
    with _client(url, secret).messages.stream(
            model="tiny", max_tokens=200, messages=ASK, tools=[FORECAST],  # type: ignore[arg-type]
            tool_choice={"type": "any", "disable_parallel_tool_use": True}) as s:
        events = list(s)
        final = s.get_final_message()
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert deltas and all(e.delta.type == "input_json_delta" for e in deltas)  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use" and [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].input["unit"] in ("celsius", "fahrenheit")  # type: ignore[union-attr,index]


def test_count_tokens_matches_the_prompt_the_engine_runs(url: str, secret: str) -> None:
    client = _client(url, secret)
    counted = client.messages.count_tokens(model="tiny", system="Be brief.", messages=ASK, tools=[FORECAST])  # type: ignore[arg-type]
    msg = client.messages.create(model="tiny", max_tokens=2, system="Be brief.", messages=ASK, tools=[FORECAST],  # type: ignore[arg-type]
                                 tool_choice={"type": "none"})
    assert counted.input_tokens > 0
    assert counted.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    with pytest.raises(anthropic.BadRequestError, match="model"):  # an upstream cannot count locally
        client.messages.count_tokens(model="fake", messages=ASK)  # type: ignore[arg-type]


def test_translated_chat_body_reaches_the_upstream(url: str, secret: str, fake: FakeUpstream) -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "forecast",
                                           "input": {"unit": "celsius", "hourly": False}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"},
                                     {"type": "text", "text": "And tomorrow?"}]},
    ]
    msg = _client(url, secret).messages.create(
        model="fake", max_tokens=4, system=[{"type": "text", "text": "Be brief."}], messages=history,  # type: ignore[arg-type]
        tools=[FORECAST], tool_choice={"type": "auto", "disable_parallel_tool_use": True},  # type: ignore[list-item]
        stop_sequences=["END"], extra_body={"top_k": 5}, metadata={"user_id": "u-1"})
    assert msg.content[0].text == " t0 t1 t2 t3" and msg.stop_reason == "max_tokens"  # type: ignore[union-attr]
    sent = fake.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert sent["messages"][2]["tool_calls"][0]["function"] == {"name": "forecast",
                                                               "arguments": '{"unit":"celsius","hourly":false}'}
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "12 C"}
    assert sent["tools"][0]["function"]["parameters"] == FORECAST["input_schema"]
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    assert sent["stop"] == ["END"] and sent["top_k"] == 5 and sent["user"] == "u-1" and sent["max_tokens"] == 4


def test_native_upstream_gets_the_messages_body_as_sent(url: str, secret: str,
                                                        native: tuple[AnthropicUpstream, str]) -> None:
    up = native[0]
    client = _client(url, secret)
    msg = client.messages.create(model="native", max_tokens=9, messages=ASK, tools=[FORECAST],  # type: ignore[arg-type]
                                 tool_choice={"type": "any"})
    path, sent, headers = up.requests[-1]
    assert path == "/v1/messages" and sent["model"] == "up-model" and sent["stream"] is True
    assert sent["messages"] == ASK and sent["tools"] == [FORECAST] and sent["tool_choice"] == {"type": "any"}
    assert headers[b"anthropic-version"]
    assert [b.type for b in msg.content] == ["text", "tool_use"] and msg.content[0].text == "Hello"  # type: ignore[union-attr]
    assert msg.content[1].id == "toolu_up" and msg.content[1].input == {"unit": "celsius", "hourly": True}  # type: ignore[union-attr]
    assert msg.stop_reason == "tool_use" and (msg.usage.input_tokens, msg.usage.output_tokens) == (7, 5)
    with client.messages.stream(model="native", max_tokens=9, messages=ASK, stop_sequences=["END"]) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "END"
    assert client.messages.count_tokens(model="native", messages=ASK).input_tokens == COUNT  # type: ignore[arg-type]
    assert up.requests[-1][0] == "/v1/messages/count_tokens" and up.requests[-1][1]["model"] == "up-model"


def test_stream_failing_midway_ends_with_an_error_event(url: str, secret: str) -> None:
    with pytest.raises(anthropic.APIStatusError, match="mid-stream"), \
            _client(url, secret).messages.stream(model="broken", max_tokens=50, messages=ASK) as s:  # type: ignore[arg-type]
        for _ in s:
            pass
    with httpx.stream("POST", f"{url}/v1/messages", json={"model": "broken", "max_tokens": 50, "messages": ASK,
                                                          "stream": True}, headers={"x-api-key": secret}) as r:
        text = r.read().decode()
    events = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error" and "message_stop" not in events


def test_sdk_raises_its_typed_errors(url: str, secret: str, keys_db: Path) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        _client(url, "bk-wrong").messages.create(model="tiny", max_tokens=4, messages=ASK)  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError, match="nope"):
        _client(url, secret).messages.create(model="nope", max_tokens=4, messages=ASK)  # type: ignore[arg-type]
    _, other = ApiKeyStore(keys_db).create("beta", models=["fake"])
    with pytest.raises(anthropic.PermissionDeniedError):
        _client(url, other).messages.create(model="tiny", max_tokens=4, messages=ASK)  # type: ignore[arg-type]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.type"):
        _client(url, secret).messages.create(model="tiny", max_tokens=4,  # type: ignore[arg-type]
                                             messages=[{"role": "user", "content": [image]}])  # type: ignore[list-item]
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        _client(url, secret).messages.create(model="tiny", max_tokens=4, messages=ASK,  # type: ignore[arg-type]
                                             thinking={"type": "enabled", "budget_tokens": 1024})
    bearer = httpx.post(f"{url}/v1/messages", json={"model": "fake", "max_tokens": 2, "messages": ASK},
                        headers={"authorization": f"Bearer {secret}"}, timeout=60)
    assert bearer.status_code == 200 and bearer.json()["type"] == "message"


@pytest.mark.parametrize(("body", "named"), [
    ({"model": "tiny", "messages": ASK}, "max_tokens"),
    ({"model": "tiny", "max_tokens": 4, "messages": []}, "messages"),
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "frobnicate": 1}, "frobnicate"),
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "temperature": 1.5}, "temperature"),
    ({"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0].type"),
    ({"model": "tiny", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]},
     "tool_use_id"),
    ({"model": "tiny", "max_tokens": 4, "messages": [
        *ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "forecast", "input": {}}]},
        {"role": "user", "content": "and?"}], "tools": [FORECAST]}, "t1"),
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "tools": [{"type": "web_search_20250305",
                                                                    "name": "web_search"}]}, "tools[0].type"),
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "tool_choice": {"type": "tool", "name": "x"},
      "tools": [FORECAST]}, "tool_choice.name"),
    ({"model": "tiny", "max_tokens": 10**6, "messages": ASK}, "max_tokens"),
    ({"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "word " * 20_000}]}, "messages"),
    # Anthropic's names where the chat translation has others (stop, response_format, max_completion_tokens).
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "stop_sequences": ["x"] * 17}, "stop_sequences"),
    ({"model": "tiny", "max_tokens": 4, "messages": ASK, "tool_choice": {"type": "any"},
      "tools": [{**FORECAST, "input_schema": {"type": "object", "properties": {"a": {"type": "nosuch"}}}}]}, "tools"),
])
def test_hostile_bodies_get_anthropic_400s(url: str, secret: str, body: dict[str, Any], named: str) -> None:
    r = _post(url, secret, body)
    assert r.status_code == 400, r.text
    obj = r.json()
    assert obj["type"] == "error" and obj["error"]["type"] == "invalid_request_error"
    assert named in obj["error"]["message"]


def test_transport_level_refusals_keep_anthropic_shape(url: str, secret: str) -> None:
    big = _post(url, secret, {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "x" * BODY_LIMIT}]})
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
    missing = httpx.post(f"{url}/v1/messages", json={"model": "tiny", "max_tokens": 4, "messages": ASK}, timeout=30)
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"
    junk = httpx.post(f"{url}/v1/messages", content=b"{not json", headers={"x-api-key": secret}, timeout=30)
    assert junk.status_code == 400 and junk.json()["type"] == "error"
    assert httpx.get(f"{url}/v1/messages", headers={"x-api-key": secret}).json()["type"] == "error"
    # The OpenAI routes keep OpenAI's shape.
    chat = httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny"}, headers={"x-api-key": secret})
    assert chat.status_code == 400 and "type" not in chat.json() and chat.json()["error"]["param"] == "messages"


def test_metrics_label_the_messages_route(url: str, secret: str) -> None:
    _client(url, secret).messages.create(model="fake", max_tokens=2, messages=ASK)  # type: ignore[arg-type]
    scrape = httpx.get(f"{url}/metrics", headers={"x-api-key": secret}).text
    assert 'route="messages"' in scrape
