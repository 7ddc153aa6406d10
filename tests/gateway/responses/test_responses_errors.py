"""Chat-side error params mapped back to the Responses request's fields (responses/errors.py);
end to end against the engine in tests/test_serve_responses.py."""

from __future__ import annotations

import pytest

from blink.gateway.responses.errors import responses_param


@pytest.mark.parametrize(("chat", "responses"), [
    ("messages", "input"),
    ("messages[3].content[0].text", "input"),  # chat indices are not input indices: the field alone
    ("max_completion_tokens", "max_output_tokens"),
    ("max_tokens", "max_output_tokens"),
    ("response_format", "text.format"),
    ("response_format.json_schema.schema", "text.format.schema"),
    ("response_format.type", "text.format.type"),
    ("tools[2].function.parameters", "tools[2].parameters"),
    ("tool_choice.function.name", "tool_choice.name"),
    ("tools", "tools"),
    ("temperature", "temperature"),
    ("input[0].role", "input[0].role"),
])
def test_chat_params_become_responses_fields(chat: str, responses: str) -> None:
    assert responses_param(chat) == responses
