"""Spec checks: a bad schema, regex, choice list or grammar is refused by name, with a clean message."""

from __future__ import annotations

import json

import pytest

from blink.engine.errors import InvalidParameterError
from blink.engine.structured.spec import PARAM, check_spec, ebnf_source, json_depth, native_message
from blink.request_limits import SAMPLING_LIMITS

GOOD = [
    ("json_object", ""),
    ("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})),
    ("regex", r"[a-z]{2,4}-\d+"),
    ("choice", json.dumps(["yes", "no", 'say "hi"\n'])),
    ("grammar", 'root ::= "a" rest\nrest ::= "b" | "c"'),
]


@pytest.mark.parametrize(("kind", "spec"), GOOD)
def test_valid_specs_pass(kind: str, spec: str, engine: str) -> None:
    check_spec(kind, spec, engine)


BAD = [
    ("json_schema", "{not json", "not valid JSON"),
    ("json_schema", json.dumps({"type": "nonsense"}), "nonsense"),
    ("json_schema", json.dumps([1, 2]), "JSON object"),
    ("json_schema", json.dumps({"$ref": "#/$defs/missing"}), "missing"),
    ("regex", "((", "regular expression"),
    ("regex", "", "empty"),
    ("choice", json.dumps([]), "non-empty list"),
    ("choice", json.dumps(["a", 1]), "non-empty list"),
    ("grammar", 'start ::= "a"', "grammar"),
    ("grammar", 'root ::= "a" |', "grammar"),
    ("xml", "<a/>", "Unknown"),
]


@pytest.mark.parametrize(("kind", "spec", "words"), BAD)
def test_invalid_specs_are_refused_without_native_paths(kind: str, spec: str, words: str, engine: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_spec(kind, spec, engine)
    assert info.value.param == PARAM
    message = str(info.value)
    assert words in message
    assert ".cc:" not in message and "/project" not in message


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="choose one of"):
        check_spec("regex", "a", "outlines")


def test_size_and_depth_limits() -> None:
    big = json.dumps({"enum": ["x" * 100] * (SAMPLING_LIMITS.max_structured_spec_chars // 100)})
    with pytest.raises(InvalidParameterError, match="characters long"):
        check_spec("json_schema", big)
    deep = '{"type": "string"}'
    for _ in range(SAMPLING_LIMITS.max_structured_depth):
        deep = '{"type": "array", "items": ' + deep + "}"
    with pytest.raises(InvalidParameterError, match="nests deeper"):
        check_spec("json_schema", deep)
    # Nesting past Python's own recursion limit is a 400 too, not a RecursionError.
    with pytest.raises(InvalidParameterError, match="nests deeper"):
        check_spec("json_schema", "[" * 20000 + "]" * 20000)


def test_choice_literals_are_escaped() -> None:
    assert ebnf_source("choice", json.dumps(['a"b', "c\\d"])) == 'root ::= "a\\"b" | "c\\\\d"'


def test_json_depth_counts_containers() -> None:
    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4


def test_native_message_strips_timestamp_and_path() -> None:
    exc = RuntimeError('[10:37:27] /project/cpp/json_schema_converter.cc:4944: Unsupported type "foo"\nmore')
    assert native_message(exc) == 'Unsupported type "foo"'


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "string", "format": "my-format"}, "my-format"),
])
def test_llguidance_refuses_keywords_it_cannot_enforce(schema: dict, words: str) -> None:
    """By name, with a 400: xgrammar accepts these and does not enforce them (README)."""
    with pytest.raises(InvalidParameterError, match=words):
        check_spec("json_schema", json.dumps(schema), "llguidance")
