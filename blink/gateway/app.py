"""The gateway app factory: routes, limits, error handling and backend lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from starlette.datastructures import State

from blink.backends.registry import BackendRegistry
from blink.config.server import ServerSettings
from blink.gateway.auth.keys import AuthMiddleware, KeyStore
from blink.gateway.chat.routes import build_router
from blink.gateway.dashboard import DashboardAccess, build_dashboard_feed, build_dashboard_router
from blink.gateway.front import GatewayFront
from blink.gateway.http.dispatch import GatewayApp, Layer, Routes
from blink.gateway.http.edge_limits import BodyLimitMiddleware, ConcurrencyLimitMiddleware
from blink.gateway.http.errors import CatchAllMiddleware
from blink.gateway.messages.errors import AnthropicErrorMiddleware
from blink.gateway.messages.routes import add_messages_routes
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.precompute.service import PrecomputeService
from blink.gateway.ratelimit.sequence_quota import SequenceQuota
from blink.gateway.status.routes import add_status_routes
from blink.gateway.tokenization.routes import add_tokenization_routes
from blink.modelserver.server import ServedModels
from blink.obs.engine_collector import LoadSource
from blink.obs.metrics import GatewayMetrics
from blink.obs.middleware import ObservabilityMiddleware
from blink.obs.observer import Observability
from blink.obs.setup import build_observability


class AppService(Protocol):
    """Extra endpoints with their own lifecycle (the Batch API): started after the backends."""

    router: Routes
    # Per-path request body limits that replace the server's (file uploads).
    body_limits: dict[str, int]

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def registry_loads(registry: BackendRegistry) -> LoadSource:
    """The engine gauges /metrics reads at scrape time, never on the request path."""
    return lambda: [(b.name, b.load()) for b in registry.backends()]


def create_app(
    registry: BackendRegistry,
    server_settings: ServerSettings,
    pipeline: GenerationPipeline | None = None,
    obs: Observability | None = None,
    key_store: KeyStore | None = None,
    model_server: ServedModels | None = None,
    models_router: Routes | None = None,
    services: Sequence[AppService] = (),
    precompute: PrecomputeService | None = None,
) -> GatewayApp:
    """An ASGI app serving ``registry``'s models; backends start in its lifespan.

    The composition root (``serve.py``) builds ``obs`` and then ``pipeline`` (with its stages) over
    ``obs``'s metrics, and passes both. Left out, the app has its own observability and a pipeline
    with no stages (tests that exercise only the HTTP surface). ``key_store`` turns API keys on.
    """
    obs = obs or build_observability(None, registry_loads(registry))
    metrics: GatewayMetrics = obs.metrics
    if pipeline is None:
        pipeline = GenerationPipeline(registry, GatewayFront(), SequenceQuota(server_settings.max_sequences_per_key),
                                      prefix_cache_scope=server_settings.prefix_cache_scope)
    gateway_front = pipeline.front

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

    # The one generation pipeline (state.pipeline): HTTP routes here, voice turns and batch lines
    # through the services serve.py built over it.
    state = State({"registry": registry, "metrics": metrics, "obs": obs, "front": gateway_front, "pipeline": pipeline,
                   "model_server": model_server, "precompute": precompute})
    served = model_server.cards if model_server is not None else list
    openai_routes = build_router(registry, server_settings, metrics, pipeline)
    add_messages_routes(openai_routes, registry, server_settings, metrics, pipeline)  # Anthropic's Messages API
    add_status_routes(openai_routes, registry, metrics, served)  # models, version, health, ready, metrics
    add_tokenization_routes(openai_routes, registry)  # vLLM's /tokenize and /detokenize
    groups = [openai_routes]
    groups += [service.router for service in services]
    if models_router is not None:  # /v1/embeddings, /v1/classify, /v1/moderations (model_endpoints/)
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
