"""The gateway's routing: a pure-ASGI ``(method, path)`` table, and the app that runs it.

Routes are collected in ``Routes`` groups (one per module: generation, models, batch, voice…) and
served by one ``Dispatcher``: a dict lookup for the fixed paths (every hot path is one), then the
few templated ones (``/v1/batches/{batch_id}``) in order. An endpoint takes a Starlette
``Request`` (path parameters in ``request.path_params``) and returns a ``Response``; failures
are raised as ``BlinkError`` and turned into OpenAI JSON by ``CatchAllMiddleware``, so there is
no exception layer, dependency runner or per-request exit stack to pass through.

``GatewayApp`` is the whole ASGI app: it answers the lifespan protocol and passes every request
through the middleware chain built once, in the order ``create_app`` declares it.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from starlette.convertors import Convertor
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from blink.protocol.errors import BlinkError, NotFoundError

Endpoint = Callable[[Request], Awaitable[Response]]
SocketEndpoint = Callable[[WebSocket], Awaitable[None]]
# A middleware class and its keyword arguments: ``cls(app, **kwargs)`` wraps the app inside it.
Layer = tuple[Callable[..., ASGIApp], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _Template:
    regex: re.Pattern[str]
    convertors: dict[str, Convertor[Any]]
    methods: dict[str, Endpoint]

    def match(self, path: str) -> dict[str, Any] | None:
        m = self.regex.match(path)
        if m is None:
            return None
        return {k: self.convertors[k].convert(v) for k, v in m.groupdict().items()}


class Routes:
    """A group of endpoints, declared with ``@routes.get(path)``, ``.post``, ``.delete``, ``.websocket``.

    Templates use Starlette's syntax (``{name}``, ``{name:path}``)."""

    def __init__(self) -> None:
        self.http: list[tuple[str, str, Endpoint]] = []
        self.sockets: dict[str, SocketEndpoint] = {}

    def add(self, method: str, path: str, endpoint: Endpoint) -> None:
        self.http.append((method, path, endpoint))

    def route(self, method: str, path: str) -> Callable[[Endpoint], Endpoint]:
        def register(endpoint: Endpoint) -> Endpoint:
            self.add(method, path, endpoint)
            return endpoint

        return register

    def get(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self.route("GET", path)

    def post(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self.route("POST", path)

    def delete(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self.route("DELETE", path)

    def websocket(self, path: str, endpoint: SocketEndpoint) -> None:
        self.sockets[path] = endpoint


def _not_found() -> BlinkError:
    return NotFoundError("Not Found")


def _method_not_allowed(allowed: Iterable[str]) -> BlinkError:
    err = BlinkError("Method Not Allowed", status=405, code="method_not_allowed",
                     headers={"allow": ", ".join(sorted(allowed))})
    err.type = "invalid_request_error"
    return err


class Dispatcher:
    """The innermost ASGI app: finds a request's endpoint and runs it; 404/405 as typed errors."""

    def __init__(self, groups: Iterable[Routes]) -> None:
        self.fixed: dict[str, dict[str, Endpoint]] = {}
        self.templates: list[_Template] = []
        self.sockets: dict[str, SocketEndpoint] = {}
        by_template: dict[str, dict[str, Endpoint]] = {}
        for group in groups:
            for method, path, endpoint in group.http:
                table = by_template.setdefault(path, {}) if "{" in path else self.fixed.setdefault(path, {})
                if method in table:
                    raise ValueError(f"two endpoints for {method} {path}")
                table[method] = endpoint
            self.sockets.update(group.sockets)
        for path, methods in by_template.items():
            regex, _, convertors = compile_path(path)
            self.templates.append(_Template(regex, convertors, methods))

    def paths(self, method: str) -> frozenset[str]:
        """The fixed paths that answer ``method`` (for tests and introspection)."""
        return frozenset(p for p, m in self.fixed.items() if method in m)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            socket = self.sockets.get(scope["path"])
            if socket is None:
                await send({"type": "websocket.close", "code": 1000})  # what Starlette answers
                return
            await socket(WebSocket(scope, receive, send))
            return
        path = scope["path"]
        methods = self.fixed.get(path)
        if methods is None:
            for template in self.templates:
                params = template.match(path)
                if params is not None:
                    scope["path_params"] = params
                    methods = template.methods
                    break
            else:
                raise _not_found()
        endpoint = methods.get(scope["method"])
        if endpoint is None:
            raise _method_not_allowed(methods)
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)


Lifespan = Callable[["GatewayApp"], AbstractAsyncContextManager[None]]


class GatewayApp:
    """The ASGI app: ``layers`` (outermost first) around a ``Dispatcher``, and a lifespan.

    ``state`` holds the composed parts (registry, metrics, pipeline…) for the composition root
    and tests; requests see the app as ``request.app``."""

    def __init__(self, groups: Sequence[Routes], layers: Sequence[Layer], lifespan: Lifespan,
                 state: State | None = None) -> None:
        self.state = state or State()
        self.dispatcher = Dispatcher(groups)
        app: ASGIApp = self.dispatcher
        for cls, kwargs in reversed(layers):
            app = cls(app, **kwargs)
        self.chain = app
        self._lifespan = lifespan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        scope["app"] = self
        await self.chain(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol around ``lifespan``: a failed start-up is reported, not raised."""
        started = False
        await receive()  # lifespan.startup
        try:
            async with self._lifespan(self):
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
        except BaseException:
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": traceback.format_exc()})
            raise
        await send({"type": "lifespan.shutdown.complete"})
