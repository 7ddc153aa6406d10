"""The gateway app factory: routes, limits, error handling and backend lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from fastapi import APIRouter, FastAPI

from blink.backends.registry import BackendRegistry
from blink.config.gateway import ObsSettings
from blink.config.server import ServerSettings
from blink.gateway.auth import AuthMiddleware, KeyStore
from blink.gateway.dashboard import DashboardAccess, build_dashboard_feed, build_dashboard_router
from blink.gateway.errors import install_error_handlers
from blink.gateway.fast_path import GatewayApp, GenerationFastPath, generation_handlers
from blink.gateway.front import GatewayFront
from blink.gateway.limits import GENERATION_PATHS, BodyLimitMiddleware, ConcurrencyLimitMiddleware
from blink.gateway.messages_errors import AnthropicErrorMiddleware
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.routes import build_router
from blink.gateway.sequence_quota import SequenceQuota
from blink.modelserver.server import ModelServer
from blink.obs.metrics import GatewayMetrics
from blink.obs.middleware import ObservabilityMiddleware
from blink.obs.setup import build_observability


class AppService(Protocol):
    """Extra endpoints with their own lifecycle (the Batch API): started after the backends."""

    router: APIRouter
    # Per-path request body limits that replace the server's (file uploads).
    body_limits: dict[str, int]

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def create_app(
    registry: BackendRegistry,
    server_settings: ServerSettings,
    front: Callable[[GatewayMetrics], GatewayFront] | None = None,
    key_store: KeyStore | None = None,
    obs_settings: ObsSettings | None = None,
    model_server: ModelServer | None = None,
    models_router: APIRouter | None = None,
    services: Sequence[AppService] = (),
) -> FastAPI:
    """An ASGI app serving ``registry``'s models; backends start in its lifespan.

    ``front`` builds the auth/rate-limit/cache stages (given the metrics registry); ``key_store``
    turns API keys on.
    """
    obs = build_observability(obs_settings, lambda: [(b.name, b.load()) for b in registry.backends()])
    metrics: GatewayMetrics = obs.metrics
    gateway_front = front(metrics) if front is not None else GatewayFront()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await registry.start_all()
        await gateway_front.start()
        for service in services:
            await service.start()
        try:
            yield
        finally:
            for service in reversed(services):
                await service.aclose()
            await gateway_front.aclose()
            await registry.aclose_all()
            if model_server is not None:
                model_server.close()
            obs.close()

    app = GatewayApp(title="Blink", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.registry = registry
    app.state.metrics = metrics
    app.state.obs = obs
    app.state.front = gateway_front
    # The one generation pipeline: HTTP routes here, voice turns and batch lines via serve.py.
    app.state.pipeline = pipeline = GenerationPipeline(
        registry, gateway_front, SequenceQuota(server_settings.max_sequences_per_key))
    served = model_server.cards if model_server is not None else list
    generation = build_router(registry, server_settings, metrics, pipeline, served)
    app.include_router(generation)
    for service in services:
        app.include_router(service.router)
    if models_router is not None:  # /v1/embeddings, /v1/classify, /v1/moderations (routes_models.py)
        app.include_router(models_router)
    # Added innermost first: requests pass the catch-all, then the body limit (which reads a
    # generation body whole first, so a slot is taken only once it is in), then concurrency,
    # then the generation endpoints are called directly (fast_path.py says why).
    fast = generation_handlers(generation)
    if models_router is not None:  # /v1/embeddings etc. are as latency-bound as generation (issue #9)
        fast.update(generation_handlers(models_router))
    for service in services:  # a service's generation endpoint (/v1/responses) is as hot as chat's
        fast.update({p: h for p, h in generation_handlers(service.router).items() if p in GENERATION_PATHS})
    app.add_middleware(GenerationFastPath, handlers=fast)
    app.hot_paths = frozenset(fast)
    app.add_middleware(ConcurrencyLimitMiddleware, max_concurrent=server_settings.max_concurrent_streams)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=server_settings.max_body_bytes,
                       path_limits={p: n for s in services for p, n in s.body_limits.items()},
                       body_timeout_s=server_settings.body_timeout_s)
    if key_store is not None:  # outermost: unauthenticated requests take no concurrency slot
        app.add_middleware(AuthMiddleware, store=key_store)
    install_error_handlers(app)
    if obs.live is not None:  # behind keys with the dashboard scope when keys are on
        app.state.dashboard_feed = build_dashboard_feed(obs, server_settings.dashboard_max_viewers)
        access = DashboardAccess(key_store) if key_store is not None else None
        app.include_router(build_dashboard_router(app.state.dashboard_feed, access))
    # Anthropic-shaped errors on the Messages routes, whichever layer inside refused the request.
    app.add_middleware(AnthropicErrorMiddleware)
    # Outermost: times every generation request as the client sees it, rejections included.
    app.add_middleware(ObservabilityMiddleware, obs=obs)
    return app
