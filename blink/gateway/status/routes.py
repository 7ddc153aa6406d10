"""The server's own endpoints, beside the APIs: /v1/models, /version, /health, /ready, /metrics.

They read the registry and the metrics and never run a generation, so they live apart from the
chat routes (which call the pipeline) and answer whatever a generation is doing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import metadata

from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import ModelCard
from blink.backends.registry import BackendRegistry
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.obs.metrics import GatewayMetrics
from blink.protocol.errors import ModelNotFoundError


def server_version() -> str:
    """The installed distribution's version (vLLM's ``/version`` shape); a source tree has none."""
    try:
        return metadata.version("blink-serve")
    except metadata.PackageNotFoundError:
        return "unknown"



def add_status_routes(
    router: Routes, registry: BackendRegistry, metrics: GatewayMetrics,
    served_models: Callable[[], list[ModelCard]] = list,
) -> None:
    """``served_models``: the model server's encoders and classifiers, listed by /v1/models beside
    the generation models, so a client sees the name each non-generative endpoint answers to."""
    started = int(time.time())

    def model_object(card: ModelCard) -> dict[str, object]:
        return {"id": card.id, "object": "model", "created": started, "owned_by": card.owned_by,
                "max_model_len": card.max_model_len}

    def cards() -> list[ModelCard]:
        generation = registry.model_cards()
        ids = {c.id for c in generation}
        return [*generation, *(c for c in served_models() if c.id not in ids)]

    @router.get("/v1/models")
    async def list_models(request: Request) -> Response:
        return json_response({"object": "list", "data": [model_object(c) for c in cards()]})

    @router.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request) -> Response:
        """OpenAI's ``models.retrieve``; ids may hold slashes (``org/name``)."""
        model_id: str = request.path_params["model_id"]
        for card in cards():
            if card.id == model_id:
                return json_response(model_object(card))
        raise ModelNotFoundError(f"The model '{model_id}' does not exist", param="model")

    @router.get("/version")
    async def version(request: Request) -> Response:
        return json_response({"version": server_version()})

    @router.get("/health")
    async def health(request: Request) -> Response:
        dead = registry.not_live()  # no I/O: a liveness probe never waits on an upstream
        return json_response({"status": "dead", "backends": dead}, 503) if dead else json_response({"status": "ok"})

    @router.get("/ready")
    async def ready(request: Request) -> Response:
        results = await registry.health_all()
        ok = all(h.ok for h in results.values())
        backends = {name: {"ok": h.ok, "detail": h.detail} for name, h in results.items()}
        return json_response({"status": "ready" if ok else "not_ready", "backends": backends}, 200 if ok else 503)

    @router.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

