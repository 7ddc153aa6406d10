"""tools / tool_choice / parallel_tool_calls validation and the forced-call schema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from blink.backends.tool_plan import forced_call_json, forced_call_schema, plan_tools
from blink.engine.structured.grammar_engine import ENGINE_NAMES
from blink.engine.structured.spec import check_spec
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
    args = [schema["$defs"][a["properties"]["arguments"]["$ref"].removeprefix("#/$defs/")] for a in alternatives]
    assert args == [WEATHER["function"]["parameters"], {"type": "object", "properties": {}}]
    single = plan_tools({"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False})
    assert single is not None and forced_call_schema(single)["type"] == "object"
    named = plan_tools({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert named is not None
    assert json.loads(forced_call_json(named))["properties"]["name"]["enum"] == ["get_time"]


def test_forced_schemas_keep_each_functions_own_references() -> None:
    """A parameters schema's ``$ref``s are relative to its own root (pydantic puts nested models
    in ``$defs``); nested in the call schema they must still resolve, each to its own function's
    definitions even where two functions use the same name."""
    def tool(name: str, unit: list[str]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {
            "$defs": {"Unit": {"type": "string", "enum": unit}},
            "type": "object", "properties": {"unit": {"$ref": "#/$defs/Unit"}, "again": {"$ref": "#"}},
            "required": ["unit"]}}}

    plan = plan_tools({"tools": [tool("a", ["celsius"]), tool("b", ["kelvin"])], "tool_choice": "required"})
    assert plan is not None
    schema = forced_call_schema(plan)
    jsonschema.validate([{"name": "a", "arguments": {"unit": "celsius", "again": {"unit": "celsius"}}},
                         {"name": "b", "arguments": {"unit": "kelvin"}}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "a", "arguments": {"unit": "kelvin"}}], schema)
    for engine in ENGINE_NAMES:  # both grammar libraries resolve the rebased references
        check_spec("json_schema", forced_call_json(plan), engine)
