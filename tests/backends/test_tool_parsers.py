"""Each tool-call format parsed from known model text, whole and split at every character."""

from __future__ import annotations

import json

import pytest

from blink.backends.tool_parsers import (
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    ParsedCall,
    ToolCallParser,
    detect_parser,
    make_parser,
)


def _run(parser: ToolCallParser, text: str, step: int) -> tuple[str, list[ParsedCall]]:
    content: list[str] = []
    calls: list[ParsedCall] = []
    for i in range(0, len(text), step):
        c, k = parser.feed(text[i : i + step])
        content.append(c)
        calls += k
    c, k = parser.finish()
    return "".join(content) + c, calls + k


def _args(call: ParsedCall) -> object:
    return json.loads(call.arguments)


HERMES = (
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
)


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(HERMES)])
def test_hermes_calls_and_content_at_any_split(step: int) -> None:
    content, calls = _run(HermesParser(), HERMES, step)
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert _args(calls[0]) == {"city": "Paris"} and _args(calls[1]) == {"tz": "CET"}
    assert content.strip() == "Let me check."


def test_hermes_plain_text_passes_through_and_holds_only_a_possible_tag() -> None:
    p = HermesParser()
    assert p.feed("a < b and <tool") == ("a < b and ", [])
    assert p.feed("box>") == ("<toolbox>", [])
    assert p.finish() == ("", [])


@pytest.mark.parametrize("body", ['{"name": "f", "arguments": {"x": 1', "not json", '{"arguments": {}}', '[1, 2]'])
def test_hermes_malformed_call_stays_content(body: str) -> None:
    text = f"<tool_call>{body}</tool_call> after"
    content, calls = _run(HermesParser(), text, 4)
    assert calls == [] and content == text


def test_hermes_unclosed_call_counts_when_its_json_is_whole() -> None:
    content, calls = _run(HermesParser(), '<tool_call>\n{"name": "f", "arguments": {"a": [1]}}\n', 5)
    assert content == "" and calls == [ParsedCall("f", '{"a": [1]}')]
    content, calls = _run(HermesParser(), '<tool_call>{"name": "f", "argu', 5)
    assert calls == [] and content == '<tool_call>{"name": "f", "argu'


def test_hermes_string_arguments_are_decoded() -> None:
    _, calls = _run(HermesParser(), '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>', 3)
    assert _args(calls[0]) == {"a": 1}


@pytest.mark.parametrize("step", [1, 4, 1000])
@pytest.mark.parametrize("prefix", ["", "<|python_tag|>", "  "])
def test_llama3_json_parameters_and_parallel_calls(step: int, prefix: str) -> None:
    text = prefix + '{"name": "search", "parameters": {"q": "blink"}}; {"name": "add", "parameters": {"a": 1}}'
    content, calls = _run(Llama3JsonParser(), text, step)
    assert content == ""
    assert [(c.name, _args(c)) for c in calls] == [("search", {"q": "blink"}), ("add", {"a": 1})]


def test_llama3_json_text_reply_streams_as_content() -> None:
    p = Llama3JsonParser()
    assert p.feed("Hello") == ("Hello", [])
    assert p.feed(" {x}") == (" {x}", [])
    assert p.finish() == ("", [])


@pytest.mark.parametrize("text", ['{"name": "f", "parameters": {"a": ', '{"nom": 1}', '{"name": "f"} trailing'])
def test_llama3_json_malformed_is_content(text: str) -> None:
    assert _run(Llama3JsonParser(), text, 3) == (text, [])


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_mistral_list_format(step: int) -> None:
    text = 'Sure. [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]'
    content, calls = _run(MistralParser(), text, step)
    assert content == "Sure. "
    assert [(c.name, _args(c)) for c in calls] == [("a", {"x": 1}), ("b", {})]


def test_mistral_v11_format() -> None:
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}'
    content, calls = _run(MistralParser(), text, 3)
    assert content == "" and [(c.name, _args(c)) for c in calls] == [("get_weather", {"city": "Oslo"}), ("get_time", {})]


def test_mistral_malformed_is_content() -> None:
    text = "[TOOL_CALLS] [{broken"
    assert _run(MistralParser(), text, 2) == (text, [])
    assert _run(MistralParser(), "no calls [TOOL", 2) == ("no calls [TOOL", [])


def test_detect_parser_from_template_markers() -> None:
    assert detect_parser("... <tool_call> ...") == "hermes"
    assert detect_parser("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert detect_parser("<|start_header_id|>ipython<|end_header_id|>") == "llama3_json"
    assert detect_parser("{{ message['content'] }}") is None
    assert detect_parser(None) is None
    assert isinstance(make_parser("mistral"), MistralParser)


DEEP = "[" * 5000 + "]" * 5000  # past json's recursion limit: a RecursionError, not a ValueError


@pytest.mark.parametrize(("parser", "text"), [
    (HermesParser, f"<tool_call>{DEEP}</tool_call>"),
    (HermesParser, f'<tool_call>{{"name": "f", "arguments": "{DEEP}"}}</tool_call>'),
    (MistralParser, f"[TOOL_CALLS] {DEEP}"),
    (MistralParser, f"[TOOL_CALLS]f[ARGS]{DEEP}"),
    (Llama3JsonParser, DEEP),
])
def test_model_text_nested_past_the_json_stack_stays_content(parser: type[ToolCallParser], text: str) -> None:
    """A model asked to print thousands of brackets inside a call's markers: content, not a failed stream."""
    content, calls = _run(parser(), text, 1000)
    assert calls == [] and content == text
