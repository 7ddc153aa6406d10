"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

The route only parses, translates (``request.py``) and renders (``response.py``):
admission, the cache, routing and the backend are the one generation pipeline's, exactly as for
chat completions. Keys arrive as ``x-api-key`` (the ``anthropic`` SDK's header) or
``Authorization: Bearer`` (``AuthMiddleware`` reads both); ``anthropic-version`` is accepted
whatever its value, as the wire format served is the current one. Errors get Anthropic's shape
from ``AnthropicErrorMiddleware``.
"""

from __future__ import annotations

import dataclasses
import time

from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import SamplingOptions, TokenCounter, with_middleware
from blink.backends.registry import BackendRegistry
from blink.backends.request_body import request_from_body
from blink.config.server import ServerSettings
from blink.gateway.auth.keys import PRINCIPAL_STATE_KEY, ApiKey, check_model_allowed
from blink.gateway.chat.request_mapping import apply_routing_headers
from blink.gateway.front import GatewayFront
from blink.gateway.http.dispatch import Routes
from blink.gateway.http.json_response import json_response
from blink.gateway.http.request_parsing import parse_json_object, require_json, validate
from blink.gateway.messages.errors import messages_param
from blink.gateway.messages.request import chat_body, messages_request
from blink.gateway.messages.response import MessagesEncoder, MessagesReplayResponse
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.rendering.error_params import renamed, renaming_params
from blink.gateway.rendering.generation_response import GenerationResponse
from blink.obs import annotate, lap
from blink.obs.metrics import GatewayMetrics
from blink.protocol.errors import BlinkError, InvalidRequestError
from blink.protocol.messages import CountTokensRequest, MessagesRequest


def add_messages_routes(router: Routes, registry: BackendRegistry, settings: ServerSettings,
                        metrics: GatewayMetrics, pipeline: GenerationPipeline) -> None:
    @router.post("/v1/messages")
    async def create_message(request: Request) -> Response:
        t0 = time.perf_counter()
        principal = _principal(request)
        require_json(request.headers.get("content-type"))
        raw = parse_json_object(await request.body())
        cache = GatewayFront.directives(raw, request.headers)
        body = validate(MessagesRequest, raw)
        lap("parse")
        if body.stop_sequences:
            # A replay cannot say which stop sequence ended the answer (the cache keeps the text
            # and finish reason only), so these requests neither read nor fill the cache.
            cache = dataclasses.replace(cache, lookup=False, store=False)
        req = apply_routing_headers(
            messages_request(body, body.model, settings.max_tokens_limit, settings.request_timeout_s),
            request.headers)
        req.native_api, req.native_body = "messages", raw  # an upstream serving /v1/messages gets it as sent
        try:
            gen = await pipeline.run(principal, req, Directives(cache))
        except BlinkError as err:
            renamed(err, messages_param)  # named as the client sent it (rendering/error_params.py)
            raise
        if gen.replay is not None:
            return MessagesReplayResponse(req, gen.replay, stream=body.stream, headers=gen.headers)
        return GenerationResponse(
            with_middleware(gen.source, renaming_params(messages_param)), req, stream=body.stream, include_usage=False,
            t0=t0, metrics=metrics,
            timeout_s=settings.request_timeout_s, on_complete=gen.on_complete, on_abandon=gen.on_abandon, extra_headers=gen.headers,
            usage_headers=gen.usage_headers, on_close=gen.close, wire=MessagesEncoder(req),
        )

    @router.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        principal = _principal(request)
        require_json(request.headers.get("content-type"))
        raw = parse_json_object(await request.body())
        body = validate(CountTokensRequest, raw)
        check_model_allowed(principal, body.model)
        backend = registry.resolve(body.model)
        if not isinstance(backend, TokenCounter):
            raise InvalidRequestError(
                f"Token counting is not available for the model '{body.model}': its backend cannot count "
                "tokens.", param="model", code="unsupported_parameter")
        chat = chat_body(body, body.model)
        req = request_from_body("count", body.model, "chat", SamplingOptions(), chat, messages=chat["messages"],
                                native_api="messages", native_body=raw)
        try:
            count = await backend.count_tokens(req)
        except BlinkError as err:
            renamed(err, messages_param)
            raise
        return json_response({"input_tokens": count})


def _principal(request: Request) -> ApiKey | None:
    principal: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    if principal is not None:  # first: a request refused by any check below is logged with its key
        annotate(key_id=principal.key_id)
    return principal
