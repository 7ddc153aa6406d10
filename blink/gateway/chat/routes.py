"""HTTP endpoints: generation, model list, liveness/readiness and metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import metadata

import orjson
from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import GenerationRequest, ModelCard
from blink.backends.registry import BackendRegistry
from blink.config.server import ServerSettings
from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, ApiKey
from blink.gateway.cache.replay import CachedReplayResponse
from blink.gateway.chat.request_mapping import apply_routing_headers, chat_request, completion_request
from blink.gateway.front import GatewayFront
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.request_parsing import parse_json_object, require_json, validate
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.rendering.generation_response import GenerationResponse
from blink.obs import annotate, lap
from blink.obs.metrics import GatewayMetrics
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import ModelNotFoundError

GenerationBody = ChatCompletionRequest | CompletionRequest
RequestMapper = Callable[..., GenerationRequest]


def server_version() -> str:
    """The installed distribution's version (vLLM's ``/version`` shape); a source tree has none."""
    try:
        return metadata.version("blink-serve")
    except metadata.PackageNotFoundError:
        return "unknown"


def _json(obj: object, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def build_router(
    registry: BackendRegistry, settings: ServerSettings, metrics: GatewayMetrics,
    pipeline: GenerationPipeline | None = None, served_models: Callable[[], list[ModelCard]] = list,
) -> Routes:
    """``served_models``: the model server's encoders and classifiers, listed by /v1/models beside
    the generation models, so a client sees the name each non-generative endpoint answers to."""
    router = Routes()
    pipeline = pipeline or GenerationPipeline(registry, GatewayFront())
    started = int(time.time())

    async def generate(request: Request, schema: type[GenerationBody], to_request: RequestMapper) -> Response:
        """Parse and map the body, run it through the pipeline, render what it returns."""
        t0 = time.perf_counter()
        principal: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
        if principal is not None:  # first: a request refused by any check below is logged with its key
            annotate(key_id=principal.key_id)
        require_json(request.headers.get("content-type"))
        raw = parse_json_object(await request.body())
        cache = GatewayFront.directives(raw, request.headers)
        body = validate(schema, raw)
        lap("parse")
        model = body.model or registry.default_model()
        req = apply_routing_headers(
            to_request(body, raw, model, settings.max_tokens_limit, settings.request_timeout_s), request.headers
        )
        gen = await pipeline.run(principal, req, Directives(cache))
        stream, include_usage = bool(body.stream), bool(body.stream_options and body.stream_options.include_usage)
        if gen.replay is not None:
            return CachedReplayResponse(req, gen.replay, stream=stream, include_usage=include_usage,
                                        headers=gen.headers)
        return GenerationResponse(
            gen.source,
            req,
            stream=stream,
            include_usage=include_usage,
            t0=t0,
            metrics=metrics,
            timeout_s=settings.request_timeout_s,
            on_complete=gen.on_complete,
            extra_headers=gen.headers,
            usage_headers=gen.usage_headers,
            on_close=gen.close,
        )

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, ChatCompletionRequest, chat_request)

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, CompletionRequest, completion_request)

    def model_object(card: ModelCard) -> dict[str, object]:
        return {"id": card.id, "object": "model", "created": started, "owned_by": card.owned_by,
                "max_model_len": card.max_model_len}

    def cards() -> list[ModelCard]:
        generation = registry.model_cards()
        ids = {c.id for c in generation}
        return [*generation, *(c for c in served_models() if c.id not in ids)]

    @router.get("/v1/models")
    async def list_models(request: Request) -> Response:
        return _json({"object": "list", "data": [model_object(c) for c in cards()]})

    @router.get("/v1/models/{model_id:path}")
    async def retrieve_model(request: Request) -> Response:
        """OpenAI's ``models.retrieve``; ids may hold slashes (``org/name``)."""
        model_id: str = request.path_params["model_id"]
        for card in cards():
            if card.id == model_id:
                return _json(model_object(card))
        raise ModelNotFoundError(f"The model '{model_id}' does not exist", param="model")

    @router.get("/version")
    async def version(request: Request) -> Response:
        return _json({"version": server_version()})

    @router.get("/health")
    async def health(request: Request) -> Response:
        dead = registry.not_live()  # no I/O: a liveness probe never waits on an upstream
        return _json({"status": "dead", "backends": dead}, 503) if dead else _json({"status": "ok"})

    @router.get("/ready")
    async def ready(request: Request) -> Response:
        results = await registry.health_all()
        ok = all(h.ok for h in results.values())
        backends = {name: {"ok": h.ok, "detail": h.detail} for name, h in results.items()}
        return _json({"status": "ready" if ok else "not_ready", "backends": backends}, 200 if ok else 503)

    @router.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return router
