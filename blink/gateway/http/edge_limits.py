"""Cheap admission limits as pure ASGI middleware, applied before any parsing.

``BodyLimitMiddleware`` counts the bytes actually received (chunked bodies and lying
``content-length`` headers included), so a large body is never buffered whole, and gives the
body a deadline (408 + close past it; paths with a larger size limit get a proportionally longer
one). On the generation paths it reads the whole body *before*
the app runs and replays it: ``ConcurrencyLimitMiddleware`` sits inside it, so a request takes a
concurrency slot only once its body is in, and connections trickling a body hold no slot.
``ConcurrencyLimitMiddleware`` caps generation requests in flight and fails fast with
503 + ``retry-after`` rather than queueing work the server cannot start soon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.gateway.http.errors import error_messages
from blink.protocol.errors import BlinkError, OverloadedError, RequestTimeoutError, RequestTooLargeError

GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"})
# A client told to retry after one second spreads a burst over the next scheduling window.
_RETRY_AFTER_S = "1"


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"Request body exceeds the limit of {limit} bytes.")


def _too_slow(timeout_s: float) -> RequestTimeoutError:
    # The rest of the body may still be on its way: answer, then close rather than read it.
    return RequestTimeoutError(f"The request body did not arrive within {timeout_s:g} s.",
                               headers={"connection": "close"})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, path_limits: dict[str, int] | None = None,
                 body_timeout_s: float | None = None, buffer_paths: Collection[str] = GENERATION_PATHS) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        # Paths with their own limit (file uploads); every other path gets ``max_body_bytes``.
        self.path_limits = path_limits or {}
        self.body_timeout_s = body_timeout_s
        # Paths whose body is read whole before the app runs (small JSON bodies, never uploads).
        self.buffer_paths = frozenset(buffer_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope["path"], self.max_body_bytes)
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or int(value) > limit:
                    await _answer(send, _too_large(limit))
                    return
                break
        loop = asyncio.get_running_loop()
        timeout_s = None
        if self.body_timeout_s is not None:
            # A path with a larger limit (uploads) gets proportionally longer: the same minimum rate.
            timeout_s = self.body_timeout_s * max(1.0, limit / self.max_body_bytes)
        deadline = None if timeout_s is None else loop.time() + timeout_s
        received = 0
        body_done = False

        async def counting_receive() -> Message:
            nonlocal received, body_done
            if body_done or deadline is None:
                message = await receive()  # after the body: only a disconnect is left to wait for
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    raise _too_slow(timeout_s or 0.0) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _too_large(limit)
                body_done = not message.get("more_body", False)
            return message

        if scope["path"] not in self.buffer_paths:
            await self.app(scope, counting_receive, send)
            return
        try:
            body = await _read_body(counting_receive)
        except BlinkError as err:
            await _answer(send, err)
            return
        if body is None:  # the client went away before its body was in
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _answer(send: Send, err: BlinkError) -> None:
    for message in error_messages(err):
        await send(message)


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
