"""OpenAI messages -> template-ready messages: content parts, null content, tool calls, kwargs."""

from __future__ import annotations

from typing import Any

import pytest

from blink.backends.chat_messages import chat_inputs
from blink.protocol.errors import InvalidRequestError


def test_text_parts_are_joined_and_the_request_is_untouched() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    out = chat_inputs(messages, None, None)
    assert out.messages == [{"role": "user", "content": "a\nb"}]
    assert isinstance(messages[0]["content"], list)


def test_assistant_tool_calls_with_null_content() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]}]
    out = chat_inputs(messages, [{"type": "function", "function": {"name": "f"}}], {"enable_thinking": False})
    assert out.messages[0]["content"] == ""
    assert out.messages[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert out.messages[0]["tool_calls"][0]["id"] == "c1"
    assert out.messages[1] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    assert out.template_kwargs == {"enable_thinking": False}
    assert call["function"]["arguments"] == '{"x": 1}'


@pytest.mark.parametrize("arguments", ["not json", "[" * 100_000 + "]" * 100_000])  # the second: a 500 before
def test_arguments_that_are_not_an_object_stay_text(arguments: str) -> None:
    call = {"function": {"name": "f", "arguments": arguments}}
    out = chat_inputs([{"role": "assistant", "tool_calls": [call]}], None, None)
    assert out.messages[0]["tool_calls"][0]["function"]["arguments"] == arguments


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}, "messages[0].content[1].type"),
    ({"type": "input_audio", "input_audio": {}}, "messages[0].content[1].type"),
    ({"type": "file", "file": {}}, "messages[0].content[1].type"),
    ({"type": "text", "text": 3}, "messages[0].content[1].text"),
    ("text", "messages[0].content[1]"),
])
def test_unreadable_parts_are_refused_by_name(part: Any, param: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        chat_inputs([{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}], None, None)
    assert exc.value.param == param


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"tokenize": True}, "chat_template_kwargs.tokenize"),
    ({"tools": []}, "chat_template_kwargs.tools"),
    ({"add_generation_prompt": "yes"}, "chat_template_kwargs.add_generation_prompt"),
])
def test_reserved_template_kwargs(kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as exc:
        chat_inputs([{"role": "user", "content": "x"}], None, kwargs)
    assert exc.value.param == param


def test_malformed_tool_call_in_history() -> None:
    with pytest.raises(InvalidRequestError) as exc:
        chat_inputs([{"role": "assistant", "tool_calls": [{"type": "function"}]}], None, None)
    assert exc.value.param == "messages[0].tool_calls[0].function.name"
