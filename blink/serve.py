"""Composition root: the only module that wires config, backends and the gateway together."""

from __future__ import annotations

import importlib
import logging

from fastapi import FastAPI

from blink.backends.base import Backend
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.backends.registry import BackendRegistry
from blink.config import DEFAULT_EMBEDDED_MODEL, ModelSettings, Settings
from blink.gateway.app import create_app
from blink.gateway.front_builder import build_front_factory, build_key_store


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
    for model in settings.models:
        registry.add(model.name, build_backend(model))
    return registry


def build_app(settings: Settings) -> FastAPI:
    return create_app(
        build_registry(settings),
        settings.server,
        front=build_front_factory(settings),
        key_store=build_key_store(settings),
    )


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
