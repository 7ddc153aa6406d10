"""HTTP endpoints: generation, model list, liveness/readiness and metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from blink.backends.base import GenerationRequest
from blink.backends.registry import BackendRegistry
from blink.config import ServerSettings
from blink.gateway.auth import PRINCIPAL_STATE_KEY, ApiKey
from blink.gateway.cache.replay import CachedReplayResponse
from blink.gateway.front import GatewayFront
from blink.gateway.generation_response import GenerationResponse
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.request_mapping import apply_routing_headers, chat_request, completion_request
from blink.gateway.request_parsing import parse_json_object, validate
from blink.obs import annotate, lap
from blink.obs.metrics import GatewayMetrics
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest

GenerationBody = ChatCompletionRequest | CompletionRequest
RequestMapper = Callable[..., GenerationRequest]


def _json(obj: object, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def build_router(
    registry: BackendRegistry, settings: ServerSettings, metrics: GatewayMetrics,
    pipeline: GenerationPipeline | None = None,
) -> APIRouter:
    router = APIRouter()
    pipeline = pipeline or GenerationPipeline(registry, GatewayFront())
    started = int(time.time())

    async def generate(request: Request, schema: type[GenerationBody], to_request: RequestMapper) -> Response:
        """Parse and map the body, run it through the pipeline, render what it returns."""
        t0 = time.perf_counter()
        principal: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
        if principal is not None:  # first: a request refused by any check below is logged with its key
            annotate(key_id=principal.key_id)
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

    @router.get("/v1/models")
    async def list_models() -> Response:
        data = [
            {"id": c.id, "object": "model", "created": started, "owned_by": c.owned_by, "max_model_len": c.max_model_len}
            for c in registry.model_cards()
        ]
        return _json({"object": "list", "data": data})

    @router.get("/health")
    async def health() -> Response:
        dead = registry.not_live()  # no I/O: a liveness probe never waits on an upstream
        return _json({"status": "dead", "backends": dead}, 503) if dead else _json({"status": "ok"})

    @router.get("/ready")
    async def ready() -> Response:
        results = await registry.health_all()
        ok = all(h.ok for h in results.values())
        backends = {name: {"ok": h.ok, "detail": h.detail} for name, h in results.items()}
        return _json({"status": "ready" if ok else "not_ready", "backends": backends}, 200 if ok else 503)

    @router.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return router
