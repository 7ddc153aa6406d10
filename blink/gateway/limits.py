"""Cheap admission limits as pure ASGI middleware, applied before any parsing.

``BodySizeLimitMiddleware`` counts the bytes actually received (chunked bodies and lying
``content-length`` headers included), so a large body is never buffered whole.
``ConcurrencyLimitMiddleware`` caps generation requests in flight and fails fast with
503 + ``retry-after`` rather than queueing work the server cannot start soon.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.gateway.errors import error_messages
from blink.protocol.errors import OverloadedError, RequestTooLargeError

GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# A client told to retry after one second spreads a burst over the next scheduling window.
_RETRY_AFTER_S = "1"


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"Request body exceeds the limit of {limit} bytes.")


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, path_limits: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        # Paths with their own limit (file uploads); every other path gets ``max_body_bytes``.
        self.path_limits = path_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope["path"], self.max_body_bytes)
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or int(value) > limit:
                    for message in error_messages(_too_large(limit)):
                        await send(message)
                    return
                break
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)
            return message

        await self.app(scope, counting_receive, send)


class ConcurrencyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_concurrent: int) -> None:
        self.app = app
        self.max_concurrent = max_concurrent
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_concurrent:
            err = OverloadedError(
                f"Too many concurrent requests (limit {self.max_concurrent}); retry shortly.",
                headers={"retry-after": _RETRY_AFTER_S},
            )
            for message in error_messages(err):
                await send(message)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
