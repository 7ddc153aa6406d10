"""Runs one batch line through the same path as an interactive request, at priority ``batch``.

The line's body is validated and mapped exactly as ``/v1/chat/completions`` or
``/v1/completions`` would (same schemas, same limits), then streamed from the resolved backend
and rendered as the non-streaming response body. A failure is the line's error response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from blink.backends.base import GenerationRequest, Usage
from blink.backends.registry import BackendRegistry
from blink.gateway.aggregate import ResponseAggregator
from blink.gateway.request_mapping import chat_request, completion_request
from blink.gateway.request_parsing import validate
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import BackendTimeoutError, BlinkError, InternalServerError

log = logging.getLogger("blink.gateway.batch")

BATCH_PRIORITY = "batch"


@dataclass(slots=True)
class LineResult:
    status: int
    request_id: str
    body: dict[str, Any]
    model: str | None = None
    usage: Usage | None = None


class LineExecutor(Protocol):
    async def __call__(self, body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult: ...


# Called after each successful line: (key id, model, usage) -> cost accounting.
UsageHook = Callable[[str | None, str, Usage], None]


class BackendLineExecutor:
    def __init__(
        self,
        registry: BackendRegistry,
        max_tokens_limit: int,
        timeout_s: float | None,
        on_usage: UsageHook | None = None,
    ) -> None:
        self._registry = registry
        self._max_tokens_limit = max_tokens_limit
        self._timeout_s = timeout_s
        self._on_usage = on_usage

    async def __call__(self, body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult:
        request_id = ""
        try:
            req = self._request(dict(body), endpoint)
            request_id = req.request_id
            backend = self._registry.resolve(req.model)
            agg = ResponseAggregator(req.kind, req.options.n, req.options.logprobs)
            async with asyncio.timeout(self._timeout_s):
                async for delta in backend.stream(req):
                    agg.add(delta)
            if self._on_usage is not None and agg.usage is not None:
                self._on_usage(key_id, req.model, agg.usage)
            return LineResult(200, request_id, agg.render(request_id, req.model, int(time.time())), req.model,
                              agg.usage)
        except BlinkError as err:
            return LineResult(err.status, request_id, err.body())
        except TimeoutError:
            err = BackendTimeoutError(f"The line did not finish within {self._timeout_s:g} s.")
            return LineResult(err.status, request_id, err.body())
        except Exception:
            log.exception("batch line failed")
            return LineResult(500, request_id, InternalServerError("The batch line failed.").body())

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
