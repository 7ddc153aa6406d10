"""POST to a generation endpoint goes straight to its handler: pure ASGI, no FastAPI layers.

The generation endpoints are the gateway's hot path. Inside the app's own middleware, FastAPI's
router, dependency runner, ``AsyncExitStack`` and exception middleware would wrap every request
and every ``send`` of the stream in six more layers that do nothing for them (errors are
``BlinkError``s, turned into OpenAI JSON by ``CatchAllMiddleware``); ``GenerationFastPath``
calls the handler instead. Outside it, ``GatewayApp`` skips FastAPI's and Starlette's own outer
layers (``__call__`` with its telemetry check, ``ServerErrorMiddleware``, exception telemetry,
the app body limit: four more wrappers per request and per ``send``) and enters the app's own
middleware directly. Everything else takes the whole FastAPI stack, and the routes stay
registered for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI
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
        if isinstance(route, APIRoute) and "POST" in (route.methods or ()) and route.path.startswith("/v1/"):
            out[route.path] = route.endpoint
    return out


class GatewayApp(FastAPI):
    """FastAPI, except that POSTs to ``hot_paths`` enter the app's own middleware chain directly.

    The chain entered is the one inside the built stack (same instances, so state such as the
    concurrency count is shared with the other paths). Its outermost layers do the skipped
    ones' jobs for these paths: ``ObservabilityMiddleware`` sees every outcome,
    ``CatchAllMiddleware`` turns any escaped exception into a 500 JSON error and
    ``BodyLimitMiddleware`` bounds the body."""

    # Paths served by GenerationFastPath (set by create_app once the middleware is added).
    hot_paths: frozenset[str] = frozenset()
    _own_stack: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.hot_paths:
            own = self._own_stack or self._find_own_stack()
            if own is not None:
                if self.root_path:
                    scope["root_path"] = self.root_path
                scope["app"] = self  # what Starlette sets: ``Request.app``
                await own(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _find_own_stack(self) -> ASGIApp | None:
        """The outermost user middleware inside the built stack, or None (then the full stack)."""
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        if not self.user_middleware:
            return None
        outermost = self.user_middleware[0].cls
        node: object = self.middleware_stack
        while node is not None and type(node) is not outermost:
            node = getattr(node, "app", None)
        self._own_stack = node  # type: ignore[assignment]
        return self._own_stack
