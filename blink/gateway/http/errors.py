"""Every failure becomes an OpenAI-style JSON error: typed errors (404/405 included) and the rest.

``CatchAllMiddleware`` is the one place: a ``BlinkError`` raised anywhere inside it (an
endpoint, the dispatcher's 404/405, a limit) is answered with its JSON body, and an unexpected
exception is logged with its traceback and answered with a 500 JSON body, never a bare
``Internal Server Error``.
"""

from __future__ import annotations

import logging

import orjson
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.protocol.errors import BlinkError, InternalServerError

log = logging.getLogger("blink.gateway")


def error_response(err: BlinkError) -> Response:
    return Response(
        orjson.dumps(err.body()), status_code=err.status, headers=err.headers, media_type="application/json"
    )


def error_messages(err: BlinkError) -> tuple[Message, Message]:
    """The two ASGI messages of a JSON error response, for code that speaks raw ASGI."""
    body = orjson.dumps(err.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    return (
        {"type": "http.response.start", "status": err.status, "headers": headers},
        {"type": "http.response.body", "body": body, "more_body": False},
    )


class CatchAllMiddleware:
    """Turn a ``BlinkError`` into its JSON answer, and any other escaped exception into a logged 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except BlinkError as err:
            if not started:
                for message in error_messages(err):
                    await send(message)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                for message in error_messages(InternalServerError("The server had an error processing your request.")):
                    await send(message)
