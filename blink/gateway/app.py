"""The gateway app factory: routes, limits, error handling and backend lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from starlette.datastructures import State

from blink.backends.registry import BackendRegistry
from blink.config.gateway import ObsSettings
from blink.config.server import ServerSettings
from blink.gateway.auth import AuthMiddleware, KeyStore
from blink.gateway.dashboard import DashboardAccess, build_dashboard_feed, build_dashboard_router
from blink.gateway.dispatch import GatewayApp, Layer, Routes
from blink.gateway.errors import CatchAllMiddleware
from blink.gateway.front import GatewayFront
from blink.gateway.limits import BodyLimitMiddleware, ConcurrencyLimitMiddleware
from blink.gateway.messages_errors import AnthropicErrorMiddleware
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.routes import build_router
from blink.gateway.sequence_quota import SequenceQuota
from blink.modelserver.server import ServedModels
from blink.obs.metrics import GatewayMetrics
from blink.obs.middleware import ObservabilityMiddleware
from blink.obs.setup import build_observability


class AppService(Protocol):
    """Extra endpoints with their own lifecycle (the Batch API): started after the backends."""

    router: Routes
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
    model_server: ServedModels | None = None,
    models_router: Routes | None = None,
    services: Sequence[AppService] = (),
) -> GatewayApp:
    """An ASGI app serving ``registry``'s models; backends start in its lifespan.

    ``front`` builds the auth/rate-limit/cache stages (given the metrics registry); ``key_store``
    turns API keys on.
    """
    obs = build_observability(obs_settings, lambda: [(b.name, b.load()) for b in registry.backends()])
    metrics: GatewayMetrics = obs.metrics
    gateway_front = front(metrics) if front is not None else GatewayFront()

    @asynccontextmanager
    async def lifespan(app: GatewayApp) -> AsyncIterator[None]:
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

    state = State()
    state.registry = registry
    state.metrics = metrics
    state.obs = obs
    state.front = gateway_front
    # The one generation pipeline: HTTP routes here, voice turns and batch lines via serve.py.
    state.pipeline = pipeline = GenerationPipeline(
        registry, gateway_front, SequenceQuota(server_settings.max_sequences_per_key))
    served = model_server.cards if model_server is not None else list
    groups = [build_router(registry, server_settings, metrics, pipeline, served)]
    groups += [service.router for service in services]
    if models_router is not None:  # /v1/embeddings, /v1/classify, /v1/moderations (routes_models.py)
        groups.append(models_router)
    if obs.live is not None:  # behind keys with the dashboard scope when keys are on
        state.dashboard_feed = build_dashboard_feed(obs, server_settings.dashboard_max_viewers)
        access = DashboardAccess(key_store) if key_store is not None else None
        groups.append(build_dashboard_router(state.dashboard_feed, access))
    # The middleware, outermost first. Observability times every request as the client sees it,
    # rejections included; Anthropic-shaped errors on the Messages routes, whichever layer inside
    # refused the request; the catch-all turns any escaped error into JSON; auth comes before the
    # limits, so unauthenticated requests take no concurrency slot; the body limit reads a
    # generation body whole before concurrency, so a slot is taken only once the body is in.
    layers: list[Layer] = [
        (ObservabilityMiddleware, {"obs": obs}),
        (AnthropicErrorMiddleware, {}),
        (CatchAllMiddleware, {}),
        *([(AuthMiddleware, {"store": key_store})] if key_store is not None else []),
        (BodyLimitMiddleware, {"max_body_bytes": server_settings.max_body_bytes,
                               "path_limits": {p: n for s in services for p, n in s.body_limits.items()},
                               "body_timeout_s": server_settings.body_timeout_s}),
        (ConcurrencyLimitMiddleware, {"max_concurrent": server_settings.max_concurrent_streams}),
    ]
    return GatewayApp(groups, layers, lifespan, state)
