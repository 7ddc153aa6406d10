"""Forced tool calls (``tool_choice: "required"`` / a named function) through ``blink serve``.

The grammar engine constrains the output to the tools' JSON schema, so even a random-weight model
calls a tool: assert it, with the real openai client (streamed deltas assembled, and whole) and
LangChain's ``bind_tools``. Needs the structured-outputs engine (``blink.engine.structured``,
issue #21's grammar work): skipped on a branch without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import openai
import pydantic
import pytest
from live_server import LiveServer

from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.app import create_app
from blink.serve import build_registry

pytest.importorskip("blink.engine.structured")

MODEL = "tiny"
# Enum and boolean arguments only: a random model under a grammar still ends them in a few tokens.
FORECAST = {"type": "function", "function": {"name": "forecast", "parameters": {
    "type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                     "hourly": {"type": "boolean"}},
    "required": ["unit", "hourly"], "additionalProperties": False}}}
ALERTS = {"type": "function", "function": {"name": "alerts", "parameters": {
    "type": "object", "properties": {"severe": {"type": "boolean"}}, "required": ["severe"],
    "additionalProperties": False}}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.fixture(scope="module")
def url(tiny_qwen2: Path) -> Iterator[str]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=2048)],
    )
    with LiveServer(create_app(build_registry(settings), settings.server)) as server:
        yield server.url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _check_call(name: str, arguments: str) -> None:
    args = json.loads(arguments)
    if name == "forecast":
        assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["hourly"], bool)
    else:
        assert name == "alerts" and isinstance(args["severe"], bool)


def test_required_streamed_deltas_assemble_into_calls(url: str) -> None:
    stream = _client(url).chat.completions.create(model=MODEL, messages=ASK, tools=[FORECAST, ALERTS],  # type: ignore[arg-type]
                                                  tool_choice="required", max_tokens=1000, seed=1, stream=True)
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for frag in choice.delta.tool_calls or []:
                slot = calls.setdefault(frag.index, {"id": None, "name": "", "arguments": ""})
                if frag.id:
                    assert slot["id"] is None and frag.type == "function"  # id and type once, first
                    slot["id"] = frag.id
                if frag.function is not None:
                    slot["name"] += frag.function.name or ""
                    slot["arguments"] += frag.function.arguments or ""
    assert finish == "tool_calls" and calls
    for call in calls.values():
        assert call["id"]
        _check_call(call["name"], call["arguments"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_and_not_parallel_give_exactly_one_call(url: str, seed: int) -> None:
    client = _client(url)
    named = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[FORECAST, ALERTS], max_tokens=1000, seed=seed,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "alerts"}})
    msg = named.choices[0].message
    assert msg.content is None and msg.tool_calls is not None and len(msg.tool_calls) == 1
    assert msg.tool_calls[0].function.name == "alerts"
    _check_call("alerts", msg.tool_calls[0].function.arguments)
    single = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[FORECAST, ALERTS], max_tokens=1000, seed=seed,  # type: ignore[arg-type]
        tool_choice="required", parallel_tool_calls=False)
    assert single.choices[0].finish_reason == "tool_calls"
    calls = single.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    _check_call(calls[0].function.name, calls[0].function.arguments)


def test_a_pydantic_tool_with_nested_models_is_forced(url: str) -> None:
    """``openai.pydantic_function_tool`` puts nested models in ``$defs`` and refers to them from
    the parameters' root: forced, that was a 400 ("Pointer '/$defs/Place' does not exist")."""
    class Place(pydantic.BaseModel):
        unit: Literal["celsius", "fahrenheit"]

    class Forecast(pydantic.BaseModel):
        place: Place
        hourly: bool

    done = _client(url).chat.completions.create(
        model=MODEL, messages=ASK, tools=[openai.pydantic_function_tool(Forecast)], max_tokens=1000, seed=0,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "Forecast"}})
    calls = done.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    Forecast.model_validate_json(calls[0].function.arguments)


@pytest.mark.parametrize("tool_choice", ["required", "alerts"])
def test_langchain_bind_tools_forced(url: str, tool_choice: str) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def alerts(severe: bool) -> str:
        """Weather alerts."""
        return "none"

    llm = ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model=MODEL, max_tokens=1000, max_retries=0, seed=3)
    answer = llm.bind_tools([alerts], tool_choice=tool_choice).invoke("Any alerts in Oslo?")
    assert answer.tool_calls and answer.tool_calls[0]["name"] == "alerts"
    assert isinstance(answer.tool_calls[0]["args"]["severe"], bool)
