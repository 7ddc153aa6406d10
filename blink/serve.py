"""Composition root: the only module that wires config, backends and the gateway together."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from blink.backends.base import Backend
from blink.backends.layered import LayeredServer
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.backends.registry import BackendRegistry
from blink.config.models import (
    DEFAULT_EMBEDDED_MODEL,
    EmbeddedModel,
    ModelSettings,
    OpenAIHTTPModel,
    VllmModel,
)
from blink.config.routing import ClassifierSettings
from blink.config.settings import Settings
from blink.gateway.app import AppService, create_app, registry_loads
from blink.gateway.auth.keys import KeyStore
from blink.gateway.batch.executor import PipelineLineExecutor
from blink.gateway.compression.metrics import CompressionCollector, CompressionStats
from blink.gateway.compression.middleware import Compressor
from blink.gateway.cost.tracker import CostTracker, build_cost_tracker
from blink.gateway.front_builder import build_front, build_key_store
from blink.gateway.http.dispatch import GatewayApp
from blink.gateway.http.gc_tuning import tune_gc
from blink.gateway.model_endpoints.routes import build_models_router
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.precompute.build import attach_precompute, build_precompute
from blink.gateway.ratelimit.sequence_quota import SequenceQuota
from blink.gateway.responses.service import build_responses_service
from blink.gateway.router.build import build_routed_backend, default_embedder
from blink.gateway.router.classifier import Embedder
from blink.gateway.router.metrics import RouterCollector
from blink.gateway.router.routed import RoutedBackend
from blink.gateway.safety.build import build_pipeline, build_safety
from blink.gateway.voice_service import VoiceService
from blink.modelserver.build import build_model_server, cache_encoder_name, cache_needs_encoder
from blink.modelserver.clients import EncoderClient
from blink.modelserver.metrics import ModelServerCollector
from blink.modelserver.server import ServedModels
from blink.obs.setup import build_observability

if TYPE_CHECKING:
    from blink.demo.default_model import FallbackModel


class EmbeddedBackendMissingError(RuntimeError):
    """The embedded engine backend is not available in this build."""


def build_backend(model: ModelSettings) -> Backend:
    """The model server for one configured model, by its ``kind`` (``BACKEND_BUILDERS``)."""
    return BACKEND_BUILDERS[model.kind](model)


def _openai_http_server(model: OpenAIHTTPModel) -> Backend:
    if model.discovery.pooled or model.base_url.startswith("dns://"):
        return build_replica_set(model)
    return _openai_http(model, model.base_url)


def _vllm(model: VllmModel) -> Backend:
    from blink.backends.vllm_process import VllmProcessBackend

    return VllmProcessBackend(model.name, model.model, model.vllm, _openai_http(model, model.vllm.base_url))


def _openai_http(model: OpenAIHTTPModel | VllmModel, base_url: str, name: str | None = None) -> OpenAIHTTPBackend:
    return OpenAIHTTPBackend(
        name or model.name,
        base_url,
        api_key_env=model.api_key_env,
        upstream_model=model.upstream_model,
        connect_timeout_s=model.connect_timeout_s,
        read_timeout_s=model.read_timeout_s,
        max_connections=model.max_connections,
        native_apis=model.native_apis,
    )


def build_replica_set(model: OpenAIHTTPModel) -> Backend:
    """An openai_http model with several replicas: a static list, or DNS (a headless Service)."""
    from blink.backends.discovery import DnsSource, ReplicaSource, StaticSource
    from blink.gateway.router.replica_set import ReplicaSetBackend

    base = model.base_url
    dns = model.discovery.mode == "dns" or base.startswith("dns://")
    source: ReplicaSource = DnsSource(base) if dns else StaticSource([base, *model.discovery.replicas])
    return ReplicaSetBackend(model.name, source, lambda name, url: _openai_http(model, url, name), model.discovery)


def _embedded(model: EmbeddedModel) -> Backend:
    # Imported lazily: the engine (and torch) load only when an embedded model is configured.
    try:
        embedded = importlib.import_module("blink.backends.embedded")
    except ImportError as exc:
        raise EmbeddedBackendMissingError(
            f"model '{model.name}' is embedded, but the embedded backend cannot be imported ({exc}); "
            "serve an OpenAI-compatible upstream with --upstream URL instead"
        ) from exc
    backend: Backend = embedded.create_embedded_backend(model, fallback_model=model_fallback(model))
    return backend


# One builder per model ``kind`` (config/models.py ``MODEL_KINDS``); a new kind adds its line here.
BACKEND_BUILDERS: dict[str, Callable[[Any], Backend]] = {
    "embedded": _embedded,
    "openai_http": _openai_http_server,
    "vllm": _vllm,
}


def model_fallback(model: ModelSettings) -> Callable[[], FallbackModel] | None:
    """What an embedded model falls back to when it cannot be had: the one decision every entry
    point (``blink serve``, ``blink engine serve``, a config file, the voice agent's and the
    dashboard's default model) goes through. Only the default model falls back (to SmolLM2 from
    PyPI, else the random demo model); a model the user named fails loudly."""
    if model.kind != "embedded" or model.model != DEFAULT_EMBEDDED_MODEL:
        return None
    from blink.demo.default_model import default_model_fallback

    return default_model_fallback


def build_registry(settings: Settings, encoder: EncoderClient | None = None) -> BackendRegistry:
    registry = BackendRegistry(default_model=settings.default_model)
    add_models(registry, settings, encoder)
    return registry


def add_models(
    registry: BackendRegistry, settings: Settings, encoder: EncoderClient | None = None,
    metrics: CollectorRegistry | None = None,
) -> None:
    """Every configured model and route into ``registry``. ``encoder``: the model server's batched
    encoder, for routes' embedding classifiers. ``metrics``: where breaker states, router and
    prompt-compression counters go (read at scrape time)."""

    def embedder(c: ClassifierSettings) -> Embedder:
        return encoder if encoder is not None and c.embedder_path is None else default_embedder(c)

    backends: dict[str, Backend] = {}
    compressing: list[tuple[str, CompressionStats]] = []
    for model in settings.models:
        backend = build_backend(model)
        if model.kind == "openai_http" and model.compression is not None:
            compressor = Compressor(model.compression, registry.resolve)
            backend = LayeredServer(backend, compressor)
            compressing.append((model.name, compressor.stats))
        backends[model.name] = backend
        registry.add(model.name, backend)
    routed: list[RoutedBackend] = []
    for route in settings.routes:
        # The replicas stay servable on their own names; the registry starts and closes them.
        routed.append(build_routed_backend(route, backends, embedder=embedder, owns_backends=False))
        registry.add(route.name, routed[-1])
    if metrics is not None and routed:
        metrics.register(RouterCollector(routed))
    if metrics is not None and compressing:
        metrics.register(CompressionCollector(compressing))


def build_services(
    settings: Settings, pipeline: GenerationPipeline, key_store: KeyStore | None, cost: CostTracker | None,
    metrics: CollectorRegistry,
) -> list[AppService]:
    """Endpoint groups with their own lifecycle: cost accounting's ledger, the Batch API when enabled
    (its lines run through the app's pipeline as the key that created the batch), stored responses,
    and ``/v1/voice`` (always routed, to say why when off; its models load at start only when on)."""
    services: list[AppService] = [cost] if cost is not None else []
    if settings.batch.enabled:
        from blink.gateway.batch.service import build_batch_service

        executor = PipelineLineExecutor(pipeline, settings.server.max_tokens_limit,
                                        settings.server.request_timeout_s, key_store)
        services.append(build_batch_service(settings.batch, executor))
    services.append(build_responses_service(settings.responses, settings.server))
    services.append(VoiceService(settings.voice, pipeline, key_store, metrics))
    return services


def build_app(settings: Settings) -> GatewayApp:
    models = build_model_server(settings)
    cache_encoder = None
    if models is not None and cache_needs_encoder(settings):
        cache_encoder = models.get(cache_encoder_name(settings.cache.semantic), "encoder")
    encoder = EncoderClient(cache_encoder) if cache_encoder is not None else None
    safety = build_safety(settings.safety, models)
    models_router = None
    if models is not None or settings.safety.enabled:
        moderation = build_pipeline(settings.safety, models, endpoint=True)
        models_router = build_models_router(models or ServedModels(), moderation, settings.model_server.max_inputs)
    # Observability first: every component below registers its scrape-time counters on its metrics.
    registry = BackendRegistry(default_model=settings.default_model)
    obs = build_observability(settings.obs, registry_loads(registry))
    metrics = obs.metrics
    add_models(registry, settings, encoder, metrics.registry)
    if models is not None:
        metrics.registry.register(ModelServerCollector(models))
    cost = build_cost_tracker(settings.cost)
    key_store = build_key_store(settings)
    front = build_front(settings, metrics, encoder, safety, cost)
    precompute = build_precompute(settings)
    pipeline = GenerationPipeline(registry, front, SequenceQuota(settings.server.max_sequences_per_key), precompute,
                                  settings.server.prefix_cache_scope)
    if precompute is not None:
        attach_precompute(precompute, pipeline, key_store, settings, metrics.registry)
    services = build_services(settings, pipeline, key_store, cost, metrics.registry)
    return create_app(
        registry,
        settings.server,
        pipeline,
        obs,
        key_store=key_store,
        model_server=models,
        models_router=models_router,
        services=[*services, *([precompute] if precompute is not None else [])],
        precompute=precompute,
    )


def configure_logging(log_level: str) -> None:
    """Blink's records at ``log_level``; other libraries' from WARNING unless debugging.

    The libraries Blink loads log their own progress at INFO on the root logger (onnxruntime's
    graph optimiser alone wrote about a hundred lines at the semantic cache's first start), which
    buried Blink's own start-up lines.
    """
    level = logging.DEBUG if log_level in ("debug", "trace") else logging.getLevelNamesMapping()[log_level.upper()]
    logging.basicConfig()  # a stderr handler on the root logger, unless one is there already
    logging.getLogger().setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))
    logging.getLogger("blink").setLevel(level)


def run(settings: Settings) -> None:
    """Serve until interrupted (uvicorn with uvloop and httptools, under Blink's HTTP limits)."""
    import uvicorn

    from blink.gateway.http.guard import guarded_protocol
    from blink.obs.log_redaction import install_log_redaction

    configure_logging(settings.server.log_level)
    app = build_app(settings)
    tune_gc()  # the process-wide GC settings (gc_tuning.py says why and what they save)
    config = uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        loop="uvloop",
        # httptools with head-size/head-time/per-address limits and JSON framing errors
        # (http/guard.py); a response's head goes out with its first bytes (http/uvicorn_protocol.py).
        http=guarded_protocol(settings.server),
        log_level=settings.server.log_level,
        access_log=settings.server.log_level in ("debug", "trace"),
        timeout_graceful_shutdown=5,
    )
    install_log_redaction()  # after uvicorn configured its handlers: the access log prints query strings
    uvicorn.Server(config).run()
