"""Messages request -> the chat request it means, and Anthropic's conversation rules kept."""

from __future__ import annotations

from typing import Any

import pytest

from blink.backends.request_body import openai_body
from blink.gateway.messages.request import messages_request
from blink.protocol.errors import InvalidRequestError
from blink.protocol.messages import MessagesRequest

# Deeper than any tool's arguments, within what the JSON parser accepts (orjson: 1024 levels).
DEEP: list[Any] = []
for _ in range(1000):
    DEEP = [DEEP]
TOOL = {"name": "f", "input_schema": {"type": "object", "properties": {}}}


def _chat(**fields: Any) -> dict[str, Any]:
    body = MessagesRequest.model_validate({"model": "m", "max_tokens": 8, **fields})
    return openai_body(messages_request(body, "m", 1000, None))


def test_consecutive_turns_merge_and_system_blocks_join() -> None:
    chat = _chat(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}}],
                 messages=[{"role": "user", "content": "one"}, {"role": "user", "content": [{"type": "text", "text": "two"}]}])
    assert chat["messages"] == [{"role": "system", "content": "A\nB"}, {"role": "user", "content": "one\ntwo"}]
    assert "continue_final_message" not in chat


def test_final_assistant_turn_is_continued() -> None:
    chat = _chat(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is"}])
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False


def test_tool_round_trip_and_error_results() -> None:
    chat = _chat(tools=[TOOL], tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True}, messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}},
                                          {"type": "tool_use", "id": "b", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "ok"}]},
                                     {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": True}]}])
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "tool"]
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "b", "content": "Error: boom"}
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}} and chat["parallel_tool_calls"] is False
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": TOOL["input_schema"]}}]


@pytest.mark.parametrize(("choice", "mapped"), [({"type": "auto"}, "auto"), ({"type": "any"}, "required"),
                                                 ({"type": "none"}, "none")])
def test_tool_choice_modes(choice: dict[str, Any], mapped: str) -> None:
    chat = _chat(tools=[TOOL], tool_choice=choice, messages=[{"role": "user", "content": "go"}])
    assert chat["tool_choice"] == mapped and chat["parallel_tool_calls"] is True


@pytest.mark.parametrize(("fields", "param"), [
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking"),
    ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "mcp_servers"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "frob": 1}]}]}, "messages[0].content[0].frob"),
    ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]},
     "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]},
     "messages[0].content[0].type"),
    ({"tools": [{"name": "f", "input_schema": {"type": "string"}}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"x": DEEP}}}]}, "tools[0].input_schema"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "f", "input": {"x": DEEP}}]}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "ok"}]}]}, "messages[1].content[0].input"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tools": [TOOL, {"name": "g", "input_schema": {"type": "object"}}, TOOL]}, "tools"),  # was accepted
    ({"tool_choice": {"type": "sometimes"}, "tools": [TOOL]}, "tool_choice.type"),
])
def test_refusals_name_the_field(fields: dict[str, Any], param: str) -> None:
    fields.setdefault("messages", [{"role": "user", "content": "hi"}])
    with pytest.raises(InvalidRequestError) as info:
        _chat(**fields)
    assert info.value.param == param


def test_disabled_thinking_and_output_neutral_fields_are_accepted() -> None:
    chat = _chat(thinking={"type": "disabled"}, cache_control={"type": "ephemeral"}, service_tier="auto",
                 metadata={"user_id": "u"}, messages=[{"role": "user", "content": "hi"}])
    assert chat["user"] == "u"
