"""Dashboard endpoints: the page, its static assets, a JSON snapshot and an SSE feed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib import resources

import orjson
from fastapi import APIRouter
from starlette.responses import Response, StreamingResponse

from blink.gateway.dashboard.breakers import breaker_states
from blink.obs.observer import Observability
from blink.protocol.errors import NotFoundError

# The page redraws once a second: often enough to watch a load test, cheap for the gateway.
PUSH_INTERVAL_S = 1.0
# An SSE connection ends after 10 minutes and EventSource reconnects by itself: no stream is
# unbounded, and a server restart is picked up without a page reload.
MAX_STREAM_S = 600.0
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def _asset(name: str) -> bytes:
    return resources.files("blink.gateway.dashboard").joinpath("static", name).read_bytes()


def build_dashboard_router(obs: Observability) -> APIRouter:
    router = APIRouter()
    live = obs.live
    # Read once at start-up: the assets are part of the installed package and never change.
    assets = {name: _asset(name) for name in ("index.html", "dashboard.js", "dashboard.css")}

    def snapshot() -> bytes:
        if live is None:
            return orjson.dumps({"disabled": True})
        snap = live.snapshot(obs.loads())
        snap["totals"]["breakers"].update(breaker_states(obs.metrics.registry))
        return orjson.dumps(snap)

    @router.get("/dashboard")
    async def page() -> Response:
        return Response(assets["index.html"], media_type=_TYPES[".html"], headers={"cache-control": "no-cache"})

    @router.get("/dashboard/static/{name}")
    async def static(name: str) -> Response:
        body = assets.get(name)
        if body is None:
            raise NotFoundError(f"No dashboard asset named {name!r}.")
        return Response(body, media_type=_TYPES["." + name.rsplit(".", 1)[-1]])

    @router.get("/dashboard/stats")
    async def stats() -> Response:
        return Response(snapshot(), media_type="application/json", headers={"cache-control": "no-store"})

    @router.get("/dashboard/events")
    async def events() -> StreamingResponse:
        async def feed() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            end = loop.time() + MAX_STREAM_S
            yield b"retry: 1000\n\n"
            while loop.time() < end:
                yield b"data: " + snapshot() + b"\n\n"
                await asyncio.sleep(PUSH_INTERVAL_S)

        return StreamingResponse(feed(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    return router
