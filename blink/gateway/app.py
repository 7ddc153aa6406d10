"""The gateway app factory: routes, limits, error handling and backend lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from blink.backends.registry import BackendRegistry
from blink.config import ServerSettings
from blink.gateway.errors import install_error_handlers
from blink.gateway.limits import BodySizeLimitMiddleware, ConcurrencyLimitMiddleware
from blink.gateway.routes import build_router
from blink.obs.metrics import GatewayMetrics


def create_app(registry: BackendRegistry, server_settings: ServerSettings) -> FastAPI:
    """An ASGI app serving ``registry``'s models; backends start in its lifespan."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await registry.start_all()
        try:
            yield
        finally:
            await registry.aclose_all()

    app = FastAPI(title="Blink", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    metrics = GatewayMetrics()
    app.state.registry = registry
    app.state.metrics = metrics
    app.include_router(build_router(registry, server_settings, metrics))
    # Added innermost first: requests pass the catch-all, then the body limit, then concurrency.
    app.add_middleware(ConcurrencyLimitMiddleware, max_concurrent=server_settings.max_concurrent_streams)
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=server_settings.max_body_bytes)
    install_error_handlers(app)
    return app
