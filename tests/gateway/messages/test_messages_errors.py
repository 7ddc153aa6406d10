"""Error responses on the Messages routes get Anthropic's body and status; other routes are untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from blink.gateway.http.errors import error_messages
from blink.gateway.messages.errors import AnthropicErrorMiddleware, messages_param
from blink.protocol.errors import BlinkError, InvalidRequestError, OverloadedError, RateLimitError


def _run(path: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        for m in messages:
            await send(m)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    asyncio.run(AnthropicErrorMiddleware(app)({"type": "http", "path": path}, receive, send))
    return sent


@pytest.mark.parametrize(("err", "status", "etype"), [
    (InvalidRequestError("bad", param="max_tokens"), 400, "invalid_request_error"),
    (OverloadedError("busy", headers={"retry-after": "1"}), 529, "overloaded_error"),
    (RateLimitError("slow down"), 429, "rate_limit_error"),
    (BlinkError("oops"), 500, "api_error"),
])
def test_blink_errors_become_anthropic_errors(err: BlinkError, status: int, etype: str) -> None:
    start, body = _run("/v1/messages", list(error_messages(err)))
    assert start["status"] == status
    obj = orjson.loads(body["body"])
    assert obj["type"] == "error" and obj["error"]["type"] == etype and err.message in obj["error"]["message"]
    headers = dict(start["headers"])
    assert int(headers[b"content-length"]) == len(body["body"])
    if err.param:
        assert obj["error"]["message"].startswith(f"{err.param}: ")
    if err.headers:
        assert headers[b"retry-after"] == b"1"


def test_split_and_non_json_bodies() -> None:
    start = {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]}
    parts = [{"type": "http.response.body", "body": b"Not ", "more_body": True},
             {"type": "http.response.body", "body": b"Found", "more_body": False}]
    out = _run("/v1/messages/batches", [start, *parts])
    assert out[0]["status"] == 404
    assert orjson.loads(out[1]["body"]) == {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}


def test_successes_and_other_routes_pass_untouched() -> None:
    ok = [{"type": "http.response.start", "status": 200, "headers": []},
          {"type": "http.response.body", "body": b"{}", "more_body": False}]
    assert _run("/v1/messages", ok) == ok
    err = list(error_messages(InvalidRequestError("bad")))
    assert _run("/v1/chat/completions", err) == err


@pytest.mark.parametrize(("chat", "anthropic"), [
    # What the chat translation (or an OpenAI-compatible upstream answering it) names.
    ("messages", "messages"),
    ("messages[1].content", "messages"),  # the system prompt and tool results shift chat indices
    ("max_completion_tokens", "max_tokens"),
    ("max_tokens", "max_tokens"),
    ("stop", "stop_sequences"),
    ("stop[2]", "stop_sequences[2]"),  # the same list, the same order
    ("user", "metadata.user_id"),
    ("tools[1].function.parameters", "tools[1].input_schema"),
    ("tools[1].function.name", "tools[1].name"),
    ("tool_choice.function.name", "tool_choice.name"),
    ("temperature", "temperature"),
])
def test_chat_params_become_messages_fields(chat: str, anthropic: str) -> None:
    assert messages_param(chat) == anthropic
