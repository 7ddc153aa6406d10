"""What a chat request asks of tools: which tools the template offers, and whether a call is forced.

OpenAI's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` arrive as raw JSON (upstreams get
them untouched); a backend that runs the model itself reads them through ``plan_tools``, which
validates them with errors naming the field, as OpenAI and vLLM do. A forced call (``required`` or
a named function) is enforced by the grammar engine: ``forced_call_schema`` is the JSON schema the
output must match, and the output is then read as JSON directly (no model-format parsing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from blink.protocol.errors import InvalidRequestError

ToolMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """``tools`` as the chat template receives them, and how this request may call them."""

    tools: list[dict[str, Any]]
    mode: ToolMode
    # The function a named ``tool_choice`` forces (mode "named").
    name: str | None = None
    parallel: bool = True

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")

    def parameters(self, name: str) -> dict[str, Any]:
        for tool in self.tools:
            fn = tool["function"]
            if fn["name"] == name:
                params = fn.get("parameters")
                return params if isinstance(params, dict) else {"type": "object", "properties": {}}
        raise KeyError(name)


def plan_tools(raw: dict[str, Any]) -> ToolPlan | None:
    """The request's tool plan; None when it offers no tools. ``InvalidRequestError`` on bad input."""
    tools = raw.get("tools")
    choice = raw.get("tool_choice")
    parallel = raw.get("parallel_tool_calls")
    if not tools:
        if choice is not None and choice not in ("none", "auto"):
            raise InvalidRequestError("'tool_choice' requires 'tools' to be specified.", param="tool_choice",
                                      code="invalid_value")
        return None
    if not isinstance(tools, list):
        raise InvalidRequestError("'tools' must be a list.", param="tools", code="invalid_type")
    names = [_check_tool(i, t) for i, t in enumerate(tools)]
    mode, name = _check_choice(choice, names)
    return ToolPlan(tools=list(tools), mode=mode, name=name, parallel=parallel is not False)


def forced_call_schema(plan: ToolPlan) -> dict[str, Any]:
    """The JSON schema of a forced call: ``{"name", "arguments"}`` objects, in an array when the
    request allows parallel calls under ``required`` (one object when named or not parallel).

    Each function's parameters sit under ``$defs`` of this document and are referenced from
    there, their own ``#...`` references rewritten to point into them: a parameters schema's
    references are relative to its own root (pydantic puts nested models in ``$defs``), which is
    no longer the document's root once it is nested here."""
    names = [plan.name] if plan.mode == "named" and plan.name is not None else [t["function"]["name"] for t in plan.tools]
    defs: dict[str, Any] = {}
    calls = []
    for i, n in enumerate(names):
        slot = f"arguments{i}"
        defs[slot] = _rebased(plan.parameters(n), f"#/$defs/{slot}")
        calls.append({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": [n]}, "arguments": {"$ref": f"#/$defs/{slot}"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })
    one: dict[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if plan.mode == "named" or not plan.parallel:
        return {**one, "$defs": defs}
    return {"type": "array", "minItems": 1, "items": one, "$defs": defs}


def _rebased(schema: Any, root: str) -> Any:
    """``schema`` with every local ``$ref`` (``#``, ``#/...``) made relative to ``root``."""
    if isinstance(schema, list):
        return [_rebased(s, root) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _rebased(v, root) for k, v in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        out["$ref"] = root + ref[1:]
    return out


def forced_call_json(plan: ToolPlan) -> str:
    return json.dumps(forced_call_schema(plan), separators=(",", ":"))


def _check_tool(i: int, tool: Any) -> str:
    if not isinstance(tool, dict):
        raise InvalidRequestError(f"'tools[{i}]' must be an object.", param=f"tools[{i}]", code="invalid_type")
    if tool.get("type") != "function":
        raise InvalidRequestError(
            f"'tools[{i}].type' {tool.get('type')!r} is not supported by this model's engine; only 'function' "
            "tools are.", param=f"tools[{i}].type", code="unsupported_parameter")
    fn = tool.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidRequestError(f"'tools[{i}].function.name' must be a non-empty string.",
                                  param=f"tools[{i}].function.name", code="invalid_value")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequestError(f"'tools[{i}].function.parameters' must be a JSON schema object.",
                                  param=f"tools[{i}].function.parameters", code="invalid_type")
    return str(fn["name"])


def _check_choice(choice: Any, names: list[str]) -> tuple[ToolMode, str | None]:
    if choice is None or choice == "auto":
        return "auto", None
    if choice in ("none", "required"):
        return choice, None
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise InvalidRequestError("'tool_choice.function.name' must be a string.",
                                      param="tool_choice.function.name", code="invalid_value")
        if name not in names:
            raise InvalidRequestError(f"'tool_choice' names the function {name!r}, which is not in 'tools'.",
                                      param="tool_choice", code="invalid_value")
        return "named", name
    raise InvalidRequestError(
        "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.",
        param="tool_choice", code="invalid_value")
