"""Every failure becomes an OpenAI-style JSON error: typed errors, HTTP errors and the rest.

``CatchAllMiddleware`` is the last line: an unexpected exception is logged with its
traceback and answered with a 500 JSON body, never a bare ``Internal Server Error``.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.protocol.errors import BlinkError, InternalServerError

log = logging.getLogger("blink.gateway")

_HTTP_TYPES = {404: ("invalid_request_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed")}


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


async def _blink_error_handler(request: Request, exc: Exception) -> Response:
    return error_response(exc if isinstance(exc, BlinkError) else InternalServerError(str(exc)))


async def _http_error_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return error_response(InternalServerError(str(exc)))
    error_type, code = _HTTP_TYPES.get(exc.status_code, ("invalid_request_error", None))
    err = BlinkError(str(exc.detail), status=exc.status_code, code=code, headers=dict(exc.headers or {}))
    err.type = error_type
    return error_response(err)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(BlinkError, _blink_error_handler)
    app.add_exception_handler(HTTPException, _http_error_handler)
    app.add_middleware(CatchAllMiddleware)


class CatchAllMiddleware:
    """Turn any exception that escaped the app into a logged 500 JSON error."""

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
