"""Errors of a translated API name the field its client sent, not the chat field it became.

The Responses and Messages APIs run as chat completions, so the checks that refuse them after the
translation (the chat checks in the pipeline, the backend's context and grammar checks, an
upstream's own 400) name chat fields: ``messages[3]``, ``max_completion_tokens``, ``stop``,
``tools[0].function.parameters``. A client can only act on a field it sent: each API gives its
``Rename`` (chat param -> its own) and its route maps every error on the way out, whether raised
before the response (``renamed``) or by the stream, before or after its first event
(``renaming_params``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from blink.backends.base import Delta, GenerationRequest, StreamFn, StreamMiddleware
from blink.protocol.errors import BlinkError

Rename = Callable[[str], str]


def renamed(err: BlinkError, rename: Rename) -> BlinkError:
    """``err`` naming the client's field (its message too, where it quotes the chat name)."""
    if not err.param:
        return err
    param = rename(err.param)
    if param != err.param:
        err.message = err.message.replace(f"'{err.param}'", f"'{param}'")
        err.args = (err.message,)
        err.param = param
    return err


def renaming_params(rename: Rename) -> StreamMiddleware:
    """Stream middleware: a ``BlinkError`` out of the stream names the client's field."""

    def middleware(inner: StreamFn) -> StreamFn:
        async def stream(req: GenerationRequest) -> AsyncIterator[Delta]:
            try:
                # aclosing: a client gone closes this stream, and at once the backend's (the abort).
                async with contextlib.aclosing(inner(req)) as deltas:  # type: ignore[type-var]
                    async for delta in deltas:
                        yield delta
            except BlinkError as err:
                renamed(err, rename)
                raise

        return stream

    return middleware
