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
from blink.gateway.front import GatewayFront
from blink.gateway.generation_response import GenerationResponse
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
    registry: BackendRegistry, settings: ServerSettings, metrics: GatewayMetrics, front: GatewayFront | None = None
) -> APIRouter:
    router = APIRouter()
    front = front or GatewayFront()
    started = int(time.time())

    async def generate(request: Request, schema: type[GenerationBody], to_request: RequestMapper) -> Response:
        """The one generation path both endpoints share: parse, resolve, admit, cache, generate."""
        t0 = time.perf_counter()
        raw = parse_json_object(await request.body())
        directives = front.directives(raw, request.headers)
        body = validate(schema, raw)
        lap("parse")
        backend = registry.resolve(body.model)
        model = body.model or registry.default_model()
        annotate(model=model, backend=backend.name)
        lap("resolve")
        admission = await front.admit(request, model, directives)
        req = apply_routing_headers(
            to_request(body, raw, model, settings.max_tokens_limit, settings.request_timeout_s), request.headers
        )
        stream, include_usage = bool(body.stream), bool(body.stream_options and body.stream_options.include_usage)
        guarded = front.guard(backend, model)
        cached = await front.lookup(admission, req, stream=stream, include_usage=include_usage, backend=guarded)
        if cached is not None:
            return cached
        return GenerationResponse(
            admission.head_start or guarded,
            req,
            stream=stream,
            include_usage=include_usage,
            t0=t0,
            metrics=metrics,
            timeout_s=settings.request_timeout_s,
            on_complete=front.on_complete(admission, req),
            extra_headers=admission.headers,
            usage_headers=front.usage_headers(admission),
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
