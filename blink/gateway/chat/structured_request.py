"""The request's output constraint, from whichever field carried it, as one ``StructuredOutput``.

Three spellings reach the same thing: OpenAI's ``response_format`` (``json_object``,
``json_schema`` strict or not), vLLM's ``structured_outputs`` ({json, regex, choice, grammar,
json_object}) and vLLM's legacy ``guided_json`` / ``guided_regex`` / ``guided_choice`` /
``guided_grammar``. At most one may be given. Only the shape is checked here (is there a schema,
is a choice list a list of strings); whether the schema, regex or grammar is valid is the serving
backend's call (the embedded engine parses it, an HTTP upstream receives the original fields).
"""

from __future__ import annotations

import json
from typing import Any

from blink.backends.base import StructuredOutput
from blink.protocol.common import SamplingFields
from blink.protocol.errors import InvalidRequestError

_GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
# structured_outputs keys that select the constraint, and those that only tune it and are honoured
# as they are: there is no fallback grammar engine, and the JSON grammars never allow free whitespace.
_SO_KINDS = ("json", "regex", "choice", "grammar", "json_object")
_SO_HONOURED = {"disable_fallback": None, "disable_any_whitespace": True}


def structured_output(body: SamplingFields) -> StructuredOutput | None:
    """The one constraint the request asks for, or None; 400 naming the field when malformed."""
    found: list[StructuredOutput] = []
    response_format = getattr(body, "response_format", None)
    if response_format is not None:
        rf = _response_format(response_format)
        if rf is not None:
            found.append(rf)
    if body.structured_outputs is not None:
        found.append(_structured_outputs(body.structured_outputs))
    found.extend(_guided(body))
    if len(found) > 1:
        fields = ", ".join(f"'{s.param}'" for s in found)
        raise InvalidRequestError(
            f"Only one output constraint may be given; this request has {fields}.",
            param=found[1].param,
            code="invalid_value",
        )
    return found[0] if found else None


def _response_format(rf: dict[str, Any]) -> StructuredOutput | None:
    kind = rf.get("type")
    allowed = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}
    if kind not in allowed:
        raise InvalidRequestError(
            f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}.",
            param="response_format.type",
            code="invalid_value",
        )
    extra = sorted(set(rf) - allowed[kind])
    if extra:
        raise InvalidRequestError(f"Unknown field 'response_format.{extra[0]}'.",
                                  param=f"response_format.{extra[0]}", code="unknown_parameter")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput("json_object", "", "response_format")
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("name"), str) or not js["name"]:
        raise InvalidRequestError("'response_format.json_schema' must be an object with a 'name'.",
                                  param="response_format.json_schema", code="invalid_value")
    unknown = sorted(set(js) - {"name", "schema", "strict", "description"})
    if unknown:
        raise InvalidRequestError(f"Unknown field 'response_format.json_schema.{unknown[0]}'.",
                                  param=f"response_format.json_schema.{unknown[0]}", code="unknown_parameter")
    if "strict" in js and not isinstance(js["strict"], bool | None):
        raise InvalidRequestError("'response_format.json_schema.strict' must be a boolean.",
                                  param="response_format.json_schema.strict", code="invalid_type")
    schema = js.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequestError("'response_format.json_schema.schema' must be a JSON schema object.",
                                  param="response_format.json_schema.schema", code="invalid_value")
    # strict or not, the output is constrained to the schema (strict only promises it).
    return StructuredOutput("json_schema", json.dumps(schema), "response_format")


def _structured_outputs(so: dict[str, Any]) -> StructuredOutput:
    for key, value in so.items():
        if key in _SO_KINDS:
            continue
        if key in _SO_HONOURED and _SO_HONOURED[key] in (None, value):
            continue
        raise InvalidRequestError(f"'structured_outputs.{key}' is not supported by this server.",
                                  param=f"structured_outputs.{key}", code="unsupported_parameter")
    chosen = [k for k in _SO_KINDS if so.get(k) not in (None, False)]
    if len(chosen) != 1:
        raise InvalidRequestError(
            "'structured_outputs' must set exactly one of " + ", ".join(f"'{k}'" for k in _SO_KINDS) + ".",
            param="structured_outputs", code="invalid_value")
    key = chosen[0]
    param = f"structured_outputs.{key}"
    value = so[key]
    if key == "json_object":
        return StructuredOutput("json_object", "", param)
    if key == "json":
        return StructuredOutput("json_schema", _schema_text(value, param), param)
    if key == "choice":
        return StructuredOutput("choice", _choices(value, param), param)
    if not isinstance(value, str):
        raise InvalidRequestError(f"'{param}' must be a string.", param=param, code="invalid_type")
    return StructuredOutput("regex" if key == "regex" else "grammar", value, param)


def _guided(body: SamplingFields) -> list[StructuredOutput]:
    out: list[StructuredOutput] = []
    if body.guided_json is not None:
        out.append(StructuredOutput("json_schema", _schema_text(body.guided_json, "guided_json"), "guided_json"))
    if body.guided_regex is not None:
        out.append(StructuredOutput("regex", body.guided_regex, "guided_regex"))
    if body.guided_choice is not None:
        out.append(StructuredOutput("choice", _choices(body.guided_choice, "guided_choice"), "guided_choice"))
    if body.guided_grammar is not None:
        out.append(StructuredOutput("grammar", body.guided_grammar, "guided_grammar"))
    return out


def _schema_text(value: Any, param: str) -> str:
    """A schema given as an object or as its JSON text (vLLM takes both)."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str):
        return value
    raise InvalidRequestError(f"'{param}' must be a JSON schema (an object or its JSON text).",
                              param=param, code="invalid_type")


def _choices(value: Any, param: str) -> str:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise InvalidRequestError(f"'{param}' must be a non-empty list of strings.", param=param,
                                  code="invalid_value")
    return json.dumps(value)
