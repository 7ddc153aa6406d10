"""The OpenAI generation endpoints: /v1/chat/completions and /v1/completions."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import GenerationRequest
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

GenerationBody = ChatCompletionRequest | CompletionRequest
RequestMapper = Callable[..., GenerationRequest]


def build_router(
    registry: BackendRegistry, settings: ServerSettings, metrics: GatewayMetrics,
    pipeline: GenerationPipeline | None = None,
) -> Routes:
    """The chat and completions routes, each one parse -> map -> pipeline -> render."""
    router = Routes()
    pipeline = pipeline or GenerationPipeline(registry, GatewayFront())

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
            on_abandon=gen.on_abandon,
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

    return router
