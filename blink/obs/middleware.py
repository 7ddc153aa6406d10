"""Pure ASGI middleware that opens and closes one ``RequestTrace`` per generation request.

It sits outermost, so it sees every outcome the client sees (401 from auth, 503 from the
concurrency limit, 400 from parsing, streamed successes) and times the request end to end.
The trace is bound to a ``ContextVar`` for the layers inside (see ``blink.obs.stages``) and
finished after the last byte was sent.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blink.obs.observer import Observability
from blink.obs.stages import bind, unbind
from blink.obs.trace import CLIENT_CLOSED

# Route label by path: the generation endpoints Blink serves.
ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/messages": "messages",
          "/v1/responses": "responses"}


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, obs: Observability) -> None:
        self.app = app
        self.obs = obs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        trace = self.obs.begin(route)
        for name, value in scope["headers"]:
            if name == b"traceparent":
                trace.traceparent = value.decode("latin-1")
        complete = False

        async def observed_send(message: Message) -> None:
            nonlocal complete
            if message["type"] == "http.response.start":
                # A status already set by the response (a mid-stream error) is not overwritten.
                if trace.status == 200:
                    trace.status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == b"x-blink-cache":  # set by the response cache (exact|semantic|miss|bypass)
                        trace.cache = value.decode("latin-1")
                    elif name == b"x-request-id" and not trace.request_id:  # a cache replay: no backend set it
                        trace.request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                if trace.first_token is None and trace.backend_start is None and trace.status < 400 and message.get("body"):
                    # A response no backend produced (a cache replay): its first byte is its first token.
                    trace.on_delta("", True)
                if not message.get("more_body", False):
                    complete = True
            await send(message)

        token = bind(trace)
        try:
            await self.app(scope, receive, observed_send)
        except BaseException:
            if trace.status == 200:
                trace.status = CLIENT_CLOSED if not complete else 500
            raise
        finally:
            unbind(token)
            if not complete and trace.status == 200:
                trace.status = CLIENT_CLOSED
            self.obs.finish(trace)
