"""Tools and content parts through ``blink serve``'s embedded engine, with real clients.

The tiny model has random weights, so it never chooses to call a tool by itself: these tests prove
that the tool inputs reach the template and that every message shape a client sends renders; the
parsing of calls from known text is in test_tool_parsers.py / test_embedded_tools.py, and forced
calls (which need the grammar engine) in test_embedded_forced_tools.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer

from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

MODEL = "tiny"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[str, EmbeddedBackend]]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=1024)],
    )
    registry = build_registry(settings)
    backend = registry.resolve(MODEL)
    assert isinstance(backend, EmbeddedBackend)
    with LiveServer(create_app(registry, settings.server)) as server:
        yield server.url, backend


@pytest.fixture
def url(served: tuple[str, EmbeddedBackend]) -> str:
    return served[0]


def test_the_parser_comes_from_the_template_or_the_setting(served: tuple[str, EmbeddedBackend]) -> None:
    url, backend = served
    assert backend.tool_parser() == "hermes"  # the tiny template teaches <tool_call>
    backend.tool_parser_setting = "none"
    try:
        with pytest.raises(openai.BadRequestError) as exc:
            _create(url, messages=ASK, tools=[WEATHER])
        assert _param(exc.value) == "tool_choice"
        assert _create(url, messages=ASK, tools=[WEATHER], tool_choice="none").choices
    finally:
        backend.tool_parser_setting = "auto"


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _create(url: str, **kw: Any) -> Any:
    return _client(url).chat.completions.create(model=MODEL, max_tokens=4, temperature=0, **kw)


def _param(exc: openai.BadRequestError) -> Any:
    body = exc.body if isinstance(exc.body, dict) else {}
    return (body.get("error") or body).get("param")


def test_tools_reach_the_template(url: str) -> None:
    plain = _create(url, messages=ASK)
    auto = _create(url, messages=ASK, tools=[WEATHER])
    none = _create(url, messages=ASK, tools=[WEATHER], tool_choice="none")
    assert auto.usage.prompt_tokens > plain.usage.prompt_tokens + 20
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens  # offered, never parsed (vLLM's default)
    for res in (auto, none):
        choice = res.choices[0]
        assert choice.finish_reason in ("stop", "length", "tool_calls")
        assert choice.message.content is not None or choice.message.tool_calls


def test_tool_round_trip_renders(url: str) -> None:
    messages = [*ASK,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    res = _create(url, messages=messages, tools=[WEATHER])
    assert res.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert res.usage.prompt_tokens > _create(url, messages=ASK, tools=[WEATHER]).usage.prompt_tokens


def test_content_parts_are_text(url: str) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the weather"},
                                          {"type": "text", "text": "in Paris?"}]}]
    joined = [{"role": "user", "content": "What is the weather\nin Paris?"}]
    a, b = _create(url, messages=parts), _create(url, messages=joined)
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    assert a.choices[0].message.content == b.choices[0].message.content


def test_guidellm_request_shape_streams(url: str) -> None:
    body = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 4,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Tell me a story."}]}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert orjson.loads(events[-2])["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(("kw", "param"), [
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]},
     "messages[0].content[1].type"),
    ({"messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}},
     "tool_choice"),
    ({"messages": ASK, "tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
    ({"messages": ASK, "tool_choice": "required"}, "tool_choice"),
    ({"messages": ASK, "extra_body": {"chat_template_kwargs": {"tokenize": True}}}, "chat_template_kwargs.tokenize"),
    ({"messages": ASK, "functions": [WEATHER["function"]]}, "functions"),
])
def test_refusals_name_the_field(url: str, kw: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        _create(url, **kw)
    assert _param(exc.value) == param


def test_langchain_tool_round_trip_and_content_blocks(url: str) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    llm = ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model=MODEL, max_tokens=4, temperature=0, max_retries=0)
    history = [HumanMessage("What is the weather in Paris?"),
               AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}]),
               ToolMessage("sunny, 21 C", tool_call_id="call_1")]
    answer = llm.bind_tools([get_weather]).invoke(history)
    assert isinstance(answer, AIMessage)
    assert answer.response_metadata["finish_reason"] in ("stop", "length", "tool_calls")
    blocks = llm.invoke([HumanMessage(content=[{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}])])
    assert isinstance(blocks, AIMessage) and blocks.usage_metadata is not None
    assert blocks.usage_metadata["output_tokens"] == 4 or blocks.response_metadata["finish_reason"] == "stop"
