"""Chat-side error params mapped back to the Responses request's fields (responses/errors.py);
end to end against the engine in tests/test_serve_responses.py."""

from __future__ import annotations

import pytest

from blink.gateway.responses.errors import responses_error, responses_param
from blink.protocol.errors import InvalidRequestError


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
    (None, None),
])
def test_chat_params_become_responses_fields(chat: str | None, responses: str | None) -> None:
    assert responses_param(chat) == responses


def test_the_message_quotes_the_responses_name_too() -> None:
    err = responses_error(InvalidRequestError("'max_completion_tokens' is too large: 9.", param="max_completion_tokens"))
    assert (err.param, err.message, str(err)) == ("max_output_tokens", "'max_output_tokens' is too large: 9.",
                                                  "'max_output_tokens' is too large: 9.")
