"""POST to a generation endpoint goes straight to its handler: pure ASGI, no FastAPI routing.

The generation endpoints are the gateway's hot path; FastAPI's router, dependency runner,
``AsyncExitStack`` and exception middleware wrap every request and every ``send`` of the stream
in six more layers that do nothing for them (errors are ``BlinkError``s, turned into OpenAI
JSON by ``CatchAllMiddleware`` outside this one). Everything else falls through to the app, and
the FastAPI routes stay registered for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Handler = Callable[[Request], Awaitable[Response]]


class GenerationFastPath:
    def __init__(self, app: ASGIApp, handlers: dict[str, Handler]) -> None:
        self.app = app
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.handlers.get(scope["path"])
            if handler is not None:
                response = await handler(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def generation_handlers(router: APIRouter) -> dict[str, Handler]:
    """The POST endpoints of ``router`` that take a ``Request`` and nothing else (by path)."""
    out: dict[str, Handler] = {}
    for route in router.routes:
        if isinstance(route, APIRoute) and "POST" in route.methods and route.path.startswith("/v1/"):
            out[route.path] = route.endpoint
    return out
