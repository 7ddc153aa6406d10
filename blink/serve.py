"""Composition root: the only module that wires config, backends and the gateway together."""

from __future__ import annotations

import importlib
import logging
from typing import cast

from fastapi import FastAPI

from blink.backends.base import Backend
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.backends.registry import BackendRegistry
from blink.config import DEFAULT_EMBEDDED_MODEL, ModelSettings, Settings
from blink.gateway.app import create_app
from blink.gateway.front_builder import build_front_factory, build_key_store
from blink.gateway.resilience.metrics import RouterCollector
from blink.gateway.router.build import build_routed_backend
from blink.gateway.router.routed import RoutedBackend


class EmbeddedBackendMissingError(RuntimeError):
    """The embedded engine backend is not available in this build."""


def build_backend(model: ModelSettings) -> Backend:
    if model.kind == "openai_http":
        return OpenAIHTTPBackend(
            model.name,
            model.base_url or "",
            api_key_env=model.api_key_env,
            upstream_model=model.upstream_model,
            connect_timeout_s=model.connect_timeout_s,
            read_timeout_s=model.read_timeout_s,
            max_connections=model.max_connections,
        )
    # Imported lazily: the engine (and torch) load only when an embedded model is configured.
    try:
        embedded = importlib.import_module("blink.backends.embedded")
    except ImportError as exc:
        raise EmbeddedBackendMissingError(
            f"model '{model.name}' is embedded, but the embedded backend cannot be imported ({exc}); "
            "serve an OpenAI-compatible upstream with --upstream URL instead"
        ) from exc
    fallback = None
    if model.model == DEFAULT_EMBEDDED_MODEL:
        # Only the default model falls back to the offline demo; a model the user named fails loudly.
        from blink.demo.tiny import demo_model_dir

        fallback = demo_model_dir
    backend: Backend = embedded.create_embedded_backend(model, fallback_model=fallback)
    return backend


def build_registry(settings: Settings) -> BackendRegistry:
    registry = BackendRegistry(default_model=settings.default_model)
    backends: dict[str, Backend] = {}
    for model in settings.models:
        backends[model.name] = build_backend(model)
        registry.add(model.name, backends[model.name])
    for route in settings.routes:
        # The replicas stay servable on their own names; the registry starts and closes them.
        registry.add(route.name, build_routed_backend(route, backends, owns_backends=False))
    return registry


def register_router_metrics(app: FastAPI, settings: Settings) -> None:
    """Breaker states and router counters on /metrics, read at scrape time."""
    if settings.routes:
        routed = [cast(RoutedBackend, app.state.registry.resolve(r.name)) for r in settings.routes]
        app.state.metrics.registry.register(RouterCollector(routed))


def build_app(settings: Settings) -> FastAPI:
    app = create_app(
        build_registry(settings),
        settings.server,
        front=build_front_factory(settings),
        key_store=build_key_store(settings),
        obs_settings=settings.obs,
    )
    register_router_metrics(app, settings)
    return app


def run(settings: Settings) -> None:
    """Serve until interrupted (uvicorn with uvloop and httptools)."""
    import uvicorn

    logging.basicConfig(level=settings.server.log_level.upper() if settings.server.log_level != "trace" else "DEBUG")
    app = build_app(settings)
    uvicorn.run(
        app,
        host=settings.server.host,
        port=settings.server.port,
        loop="uvloop",
        http="httptools",
        log_level=settings.server.log_level,
        access_log=settings.server.log_level in ("debug", "trace"),
        timeout_graceful_shutdown=5,
    )
