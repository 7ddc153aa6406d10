"""Errors on ``/v1/responses`` name the Responses field the client sent, not the chat field it became.

A Responses request runs as a chat completion (translate.py), so the checks that refuse it (the
chat schema and token limits, the backend's context and grammar checks, an upstream's own 400)
name chat fields: ``messages``, ``max_completion_tokens``, ``response_format``,
``tools[0].function.parameters``. A client (and the ``openai`` SDK's ``BadRequestError.param``) can
only act on a field it sent, so every error on the way out is mapped back: raised by the route
(``responses_error``) or by the stream before or after its first event (``responses_params``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

from blink.backends.base import Delta, GenerationRequest, StreamFn
from blink.protocol.errors import BlinkError

# A chat field -> the Responses field it was translated from (the rest of the path follows).
_FIELDS = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens"}
# ``response_format.json_schema.schema`` is ``text.format.schema``: Responses has no json_schema level.
_FORMAT = re.compile(r"response_format(?:\.json_schema)?")
# ``tools[0].function.parameters`` is ``tools[0].parameters``, ``tool_choice.function.name`` is
# ``tool_choice.name``: Responses tools are flat.
_FUNCTION = re.compile(r"^(tools\[\d+\]|tool_choice)\.function")


def responses_param(param: str | None) -> str | None:
    """The Responses request field a chat-side ``param`` stands for."""
    if not param:
        return param
    if param == "messages" or param.startswith(("messages[", "messages.")):
        # Chat messages are instructions + history + input items, merged (parallel calls are one
        # message): their indices are not the input's.
        return "input"
    head, sep, rest = param.partition(".")
    if head in _FIELDS:
        return _FIELDS[head] + sep + rest
    if param.startswith("response_format"):
        return _FORMAT.sub("text.format", param, count=1)
    return _FUNCTION.sub(r"\1", param, count=1)


def responses_error(err: BlinkError) -> BlinkError:
    """``err`` naming the Responses field (its message too, where it quotes the chat name)."""
    param = responses_param(err.param)
    if param != err.param and err.param:
        err.message = err.message.replace(f"'{err.param}'", f"'{param}'")
        err.args = (err.message,)
        err.param = param
    return err


def responses_params(inner: StreamFn) -> StreamFn:
    """Stream middleware: a ``BlinkError`` out of the stream names the Responses field."""

    async def stream(req: GenerationRequest) -> AsyncIterator[Delta]:
        try:
            # aclosing: a client gone closes this stream, and at once the backend's (the abort).
            async with contextlib.aclosing(inner(req)) as deltas:  # type: ignore[type-var]
                async for delta in deltas:
                    yield delta
        except BlinkError as err:
            responses_error(err)
            raise

    return stream
