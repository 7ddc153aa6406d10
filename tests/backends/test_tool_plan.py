"""tools / tool_choice / parallel_tool_calls validation and the forced-call schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from blink.backends.tool_plan import forced_call_json, forced_call_schema, plan_tools
from blink.protocol.errors import InvalidRequestError

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}


def test_no_tools_no_plan() -> None:
    assert plan_tools({}) is None
    assert plan_tools({"tools": [], "tool_choice": "auto"}) is None
    assert plan_tools({"tool_choice": "none"}) is None


def test_modes() -> None:
    plan = plan_tools({"tools": [WEATHER]})
    assert plan is not None and plan.mode == "auto" and plan.parallel and not plan.forced
    plan = plan_tools({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False})
    assert plan is not None and plan.forced and not plan.parallel
    plan = plan_tools({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert plan is not None and plan.mode == "named" and plan.name == "get_time"


@pytest.mark.parametrize(("raw", "param"), [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": "x"}, "tools"),
    ({"tools": [1]}, "tools[0]"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools[0].function.parameters"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name"),
])
def test_bad_input_names_the_field(raw: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        plan_tools(raw)
    assert exc.value.param == param


def test_forced_schemas() -> None:
    plan = plan_tools({"tools": [WEATHER, TIME], "tool_choice": "required"})
    assert plan is not None
    schema = forced_call_schema(plan)
    assert schema["type"] == "array" and schema["minItems"] == 1
    alternatives = schema["items"]["anyOf"]
    assert [a["properties"]["name"]["enum"] for a in alternatives] == [["get_weather"], ["get_time"]]
    assert alternatives[0]["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert alternatives[1]["properties"]["arguments"] == {"type": "object", "properties": {}}
    single = plan_tools({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False})
    assert single is not None and forced_call_schema(single)["type"] == "object"
    named = plan_tools({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert named is not None
    assert json.loads(forced_call_json(named))["properties"]["name"]["enum"] == ["get_time"]
