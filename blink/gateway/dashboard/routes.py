"""Dashboard endpoints: the page, its static assets, a JSON snapshot and an SSE feed.

With API keys on, the page, the snapshot and the feed need a key with the ``dashboard`` scope
(``access.py`` says how a browser presents it); the static assets hold no data and stay open so
the sign-in page can be styled. Every viewer reads the same snapshot (``feed.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib import resources

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from blink.gateway.dashboard.access import DashboardAccess
from blink.gateway.dashboard.breakers import breaker_states
from blink.gateway.dashboard.feed import SnapshotFeed
from blink.gateway.dashboard.savings import compression_panel, precompute_panel
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.errors import error_response
from blink.obs.observer import Observability
from blink.protocol.errors import AuthenticationError, NotFoundError

# The page redraws once a second: often enough to watch a load test, cheap for the gateway.
PUSH_INTERVAL_S = 1.0
# An SSE connection ends after 10 minutes and EventSource reconnects by itself: no stream is
# unbounded, and a server restart is picked up without a page reload.
MAX_STREAM_S = 600.0
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def _asset(name: str) -> bytes:
    return resources.files("blink.gateway.dashboard").joinpath("static", name).read_bytes()


class _ViewerStream(StreamingResponse):
    """An SSE response that counts its viewer out however it ends (done, disconnect, error)."""

    def __init__(self, feed: SnapshotFeed, content: AsyncIterator[bytes]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._feed.leave()


def build_dashboard_feed(obs: Observability, max_viewers: int) -> SnapshotFeed:
    live = obs.live

    def snapshot() -> bytes:
        if live is None:
            return orjson.dumps({"disabled": True})
        snap = live.snapshot(obs.loads())
        registry = obs.metrics.registry
        snap["totals"]["breakers"].update(breaker_states(registry))
        snap["totals"]["precompute"] = precompute_panel(registry)
        snap["totals"]["compression"] = compression_panel(registry)
        return orjson.dumps(snap)

    return SnapshotFeed(snapshot, PUSH_INTERVAL_S, max_viewers)


def build_dashboard_router(feed: SnapshotFeed, access: DashboardAccess | None = None) -> Routes:
    """``access``: the key check when API keys are on (None: the dashboard is open)."""
    router = Routes()
    # Read once at start-up: the assets are part of the installed package and never change.
    assets = {name: _asset(name) for name in ("index.html", "login.html", "dashboard.js", "dashboard.css")}

    async def allowed(request: Request) -> None:
        if access is not None:
            await access.check(request)

    @router.get("/dashboard")
    async def page(request: Request) -> Response:
        try:
            await allowed(request)
        except AuthenticationError as err:
            if "text/html" not in request.headers.get("accept", ""):
                return error_response(err)
            # A browser without a session: the sign-in form, still a 401.
            return Response(assets["login.html"], status_code=401, media_type=_TYPES[".html"],
                            headers={"cache-control": "no-store"})
        return Response(assets["index.html"], media_type=_TYPES[".html"], headers={"cache-control": "no-cache"})

    if access is not None:
        router.add("POST", "/dashboard/session", access.open_session)

    @router.get("/dashboard/static/{name}")
    async def static(request: Request) -> Response:
        name: str = request.path_params["name"]
        body = assets.get(name)
        if body is None or name == "login.html":
            raise NotFoundError(f"No dashboard asset named {name!r}.")
        return Response(body, media_type=_TYPES["." + name.rsplit(".", 1)[-1]])

    @router.get("/dashboard/stats")
    async def stats(request: Request) -> Response:
        await allowed(request)
        return Response(feed.latest(), media_type="application/json", headers={"cache-control": "no-store"})

    @router.get("/dashboard/events")
    async def events(request: Request) -> StreamingResponse:
        await allowed(request)
        feed.join()  # 503 + retry-after at the cap

        async def stream() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            end = loop.time() + MAX_STREAM_S
            yield b"retry: 1000\n\n"
            seen = 0
            while loop.time() < end:
                seen, data = await feed.next(seen)
                yield b"data: " + data + b"\n\n"

        return _ViewerStream(feed, stream())

    return router
