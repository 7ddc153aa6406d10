"""Anthropic-style errors for the Messages API routes, whichever layer refused the request.

A request to ``/v1/messages`` can be refused by auth, the body limit, the concurrency limit, the
pipeline's admission or the backend, and each of those answers with Blink's OpenAI-style body.
The ``anthropic`` SDK reads ``{"type": "error", "error": {"type": ..., "message": ...}}`` and picks
its exception by status (529 is its ``OverloadedError``). Rather than teach every layer a second
format, ``AnthropicErrorMiddleware`` wraps the Messages paths only and rewrites an error response
on its way out; the OpenAI routes never pass through it. Mid-stream failures are rendered by
``messages/response.py`` directly as an ``error`` event.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.protocol.errors import BlinkError

MESSAGES_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
_PREFIX = "/v1/messages"
# Anthropic's error types by HTTP status (its documented table); others are invalid requests
# when 4xx and api errors when 5xx.
_TYPES = {401: "authentication_error", 402: "billing_error", 403: "permission_error", 404: "not_found_error",
          413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 504: "timeout_error",
          529: "overloaded_error"}
# Anthropic reports an overloaded service as 529, never 503.
_STATUS = {503: 529}


# A chat field -> the Messages field it was translated from (the rest of the path follows).
_FIELDS = {"max_completion_tokens": "max_tokens", "stop": "stop_sequences", "user": "metadata.user_id"}
_HEAD = re.compile(r"[a-z_]+")
# ``tools[0].function.parameters`` is ``tools[0].input_schema``; ``tools[0].function.name`` is
# ``tools[0].name``; ``tool_choice.function.name`` is ``tool_choice.name``.
_FUNCTION = re.compile(r"^(tools\[\d+\]|tool_choice)\.function")


def messages_param(param: str) -> str:
    """The Messages request field a chat-side error ``param`` stands for (rendering/error_params.py)."""
    if param.startswith(("messages[", "messages.")):
        # The chat conversation is the system prompt, then the messages with each tool result
        # its own message: its indices are not the client's.
        return "messages"
    head = _HEAD.match(param)
    if head is not None and head.group(0) in _FIELDS:
        return _FIELDS[head.group(0)] + param[head.end():]
    param = _FUNCTION.sub(r"\1", param, count=1)
    return re.sub(r"^(tools\[\d+\])\.parameters", r"\1.input_schema", param, count=1)


def anthropic_status(status: int) -> int:
    return _STATUS.get(status, status)


def anthropic_error_type(status: int) -> str:
    status = anthropic_status(status)
    return _TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def anthropic_error_of(err: BlinkError) -> dict[str, Any]:
    """The body for ``err``; the field it names is in the message, as Anthropic's are."""
    message = err.message
    if err.param and err.param not in message:
        message = f"{err.param}: {message}"
    return anthropic_error_body(err.status, message)


class AnthropicErrorMiddleware:
    """Rewrites error responses under ``/v1/messages`` into Anthropic's body and status codes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(_PREFIX):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        parts: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    await send(message)
                    return
                start = message  # held until the whole error body is in
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                for out in _rewritten(start, b"".join(parts)):
                    await send(out)

        await self.app(scope, receive, rewriting_send)


def _rewritten(start: Message, body: bytes) -> tuple[Message, Message]:
    status = start["status"]
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and obj.get("type") != "error":
        message = str(err.get("message") or "")
        param = err.get("param")
        if param and param not in message:
            message = f"{param}: {message}"
    else:  # not Blink's shape (already Anthropic's, or a bare text body): keep its text
        message = body[:500].decode("utf-8", "replace") if err is None else str(err.get("message") or "")
    out = orjson.dumps(anthropic_error_body(status, message))
    headers = [(k, v) for k, v in start.get("headers", ()) if k not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    return ({"type": "http.response.start", "status": anthropic_status(status), "headers": headers},
            {"type": "http.response.body", "body": out, "more_body": False})
