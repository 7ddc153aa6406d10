"""Each spelling of an output constraint maps to one StructuredOutput; malformed ones are 400s."""

from __future__ import annotations

import json
from typing import Any

import pytest

from blink.backends.base import StructuredOutput
from blink.gateway.chat.structured_request import structured_output
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import InvalidRequestError

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def _chat(**extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **extra})


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ({}, None),
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, StructuredOutput("json_object", "", "response_format")),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA, "strict": True}}},
         StructuredOutput("json_schema", json.dumps(SCHEMA), "response_format")),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA, "strict": False}}},
         StructuredOutput("json_schema", json.dumps(SCHEMA), "response_format")),
        ({"guided_json": SCHEMA}, StructuredOutput("json_schema", json.dumps(SCHEMA), "guided_json")),
        ({"guided_json": json.dumps(SCHEMA)}, StructuredOutput("json_schema", json.dumps(SCHEMA), "guided_json")),
        ({"guided_regex": "a+"}, StructuredOutput("regex", "a+", "guided_regex")),
        ({"guided_choice": ["x", "y"]}, StructuredOutput("choice", '["x", "y"]', "guided_choice")),
        ({"guided_grammar": 'root ::= "a"'}, StructuredOutput("grammar", 'root ::= "a"', "guided_grammar")),
        ({"structured_outputs": {"json": SCHEMA}},
         StructuredOutput("json_schema", json.dumps(SCHEMA), "structured_outputs.json")),
        ({"structured_outputs": {"regex": "b", "disable_fallback": True}},
         StructuredOutput("regex", "b", "structured_outputs.regex")),
        ({"structured_outputs": {"choice": ["z"]}}, StructuredOutput("choice", '["z"]', "structured_outputs.choice")),
        ({"structured_outputs": {"grammar": "g"}}, StructuredOutput("grammar", "g", "structured_outputs.grammar")),
        ({"structured_outputs": {"json_object": True}},
         StructuredOutput("json_object", "", "structured_outputs.json_object")),
    ],
)
def test_each_spelling_maps_to_one_constraint(extra: dict[str, Any], want: StructuredOutput | None) -> None:
    assert structured_output(_chat(**extra)) == want


def test_completions_take_the_same_fields() -> None:
    body = CompletionRequest.model_validate({"prompt": "p", "response_format": {"type": "json_object"}})
    assert structured_output(body) == StructuredOutput("json_object", "", "response_format")
    body = CompletionRequest.model_validate({"prompt": "p", "guided_regex": "x"})
    assert structured_output(body) == StructuredOutput("regex", "x", "guided_regex")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format.schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": [1]}}},
         "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "strict": "yes"}}},
         "response_format.json_schema.strict"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}, "x": 1}}},
         "response_format.json_schema.x"),
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"regex": "a", "grammar": "b"}}, "structured_outputs"),
        ({"structured_outputs": {"regex": 5}}, "structured_outputs.regex"),
        ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern"),
        ({"structured_outputs": {"regex": "a", "disable_any_whitespace": False}},
         "structured_outputs.disable_any_whitespace"),
        ({"guided_choice": []}, "guided_choice"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ],
)
def test_malformed_constraints_are_400_naming_the_field(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        structured_output(_chat(**extra))
    assert info.value.param == param
