"""Runs one batch line through the generation pipeline, as the key that created the batch.

The line's body is validated and mapped exactly as ``/v1/chat/completions`` or
``/v1/completions`` would (same schemas, same limits), then handed to ``GenerationPipeline.run``
with the creating key's live record: its model permission, budget, rate limits, sequence quota,
the safety guard and the cache apply to every line as to an interactive request. Lines run at
priority ``batch`` (the server's choice for this door, so it needs no scope). A failure is the
line's error response; a refusal the runner may retry later (429 ``rate_limit_exceeded``,
``too_many_sequences``) carries its ``retry-after`` in ``LineResult.headers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.datastructures import Headers

from blink.backends.base import GenerationRequest, Usage
from blink.gateway.auth.keys import ApiKey, KeyStore
from blink.gateway.chat.request_mapping import chat_request, completion_request
from blink.gateway.front import GatewayFront
from blink.gateway.http.request_parsing import validate
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import AuthenticationError, BackendTimeoutError, BlinkError, InternalServerError

log = logging.getLogger("blink.gateway.batch")

BATCH_PRIORITY = "batch"
_NO_HEADERS = Headers()


@dataclass(slots=True)
class LineResult:
    status: int
    request_id: str
    body: dict[str, Any]
    model: str | None = None
    usage: Usage | None = None
    # The error's HTTP headers (``retry-after`` on a 429 the runner may retry); empty on success.
    headers: dict[str, str] = field(default_factory=dict)


class LineExecutor(Protocol):
    async def __call__(self, body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult: ...


class PipelineLineExecutor:
    """``pipeline`` is attached once the app (and so the front it wraps) is built (serve.py)."""

    def __init__(
        self,
        pipeline: GenerationPipeline,
        max_tokens_limit: int,
        timeout_s: float | None,
        key_store: KeyStore | None = None,
    ) -> None:
        self.pipeline = pipeline
        self._registry = pipeline.registry
        self._max_tokens_limit = max_tokens_limit
        self._timeout_s = timeout_s
        # None: API keys are off, and every line runs anonymously (as an interactive request would).
        self._key_store = key_store

    async def __call__(self, body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult:
        request_id = ""
        try:
            pipeline = self.pipeline
            key = await self._principal(key_id)
            raw = dict(body)
            cache = GatewayFront.directives(raw, _NO_HEADERS)
            req = self._request(raw, endpoint)
            request_id = req.request_id
            agg = ResponseAggregator(req.kind, req.num_choices, req.options.logprobs, req.options.return_token_ids)
            async with asyncio.timeout(self._timeout_s):
                gen = await pipeline.run(key, req, Directives(cache, server_lane=BATCH_PRIORITY))
                try:
                    async with contextlib.aclosing(gen.stream()) as deltas:  # type: ignore[type-var]
                        async for delta in deltas:
                            agg.add(delta)
                finally:
                    gen.close()
            return LineResult(200, request_id, agg.render(request_id, req.model, int(time.time())), req.model,
                              agg.usage)
        except BlinkError as err:
            return LineResult(err.status, request_id, err.body(), headers=dict(err.headers))
        except TimeoutError:
            err = BackendTimeoutError(f"The line did not finish within {self._timeout_s:g} s.")
            return LineResult(err.status, request_id, err.body())
        except Exception:
            log.exception("batch line failed")
            return LineResult(500, request_id, InternalServerError("The batch line failed.").body())

    async def _principal(self, key_id: str | None) -> ApiKey | None:
        """The creating key as it is now: a key revoked since the batch was created runs nothing."""
        if self._key_store is None or key_id is None:
            return None
        key = await self._key_store.aby_id(key_id)
        if key is None:
            raise AuthenticationError("The API key that created this batch has been revoked.", code="invalid_api_key")
        return key

    def _request(self, raw: dict[str, Any], endpoint: str) -> GenerationRequest:
        raw.pop("stream", None)  # a batch line is answered whole
        raw.pop("stream_options", None)
        model = raw.get("model") or self._registry.default_model()
        if endpoint == "/v1/chat/completions":
            req = chat_request(validate(ChatCompletionRequest, raw), raw, model, self._max_tokens_limit,
                               self._timeout_s)
        else:
            req = completion_request(validate(CompletionRequest, raw), raw, model, self._max_tokens_limit,
                                     self._timeout_s)
        req.priority = BATCH_PRIORITY
        return req
