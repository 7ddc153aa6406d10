"""Stamp each delta of a backend stream onto the current request's trace.

The response wraps ``backend.stream(req)`` with ``observe_stream``; with no trace bound (a
caller outside the HTTP path) the backend's iterator is returned untouched.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from blink.backends.base import Delta, GenerationRequest
from blink.obs.stages import current_trace
from blink.obs.trace import RequestTrace


def observe_stream(it: AsyncIterator[Delta], req: GenerationRequest, backend: str) -> AsyncIterator[Delta]:
    trace = current_trace()
    if trace is None:
        return it
    trace.request_id = req.request_id
    trace.model = trace.model or req.model
    trace.backend = backend
    trace.tier = req.tier or trace.tier
    trace.max_tokens = req.options.max_tokens
    trace.temperature = req.options.temperature
    trace.top_p = req.options.top_p
    if trace.output is not None:  # prompt logging is on
        trace.prompt = req.messages if req.kind == "chat" else req.prompt
    trace.backend_start = time.perf_counter()
    return _stamped(it, trace)


async def _stamped(it: AsyncIterator[Delta], trace: RequestTrace) -> AsyncIterator[Delta]:
    try:
        async for delta in it:
            trace.on_delta(delta.text, bool(delta.token_ids))
            if delta.finish_reason is not None:
                trace.finish_reason = delta.finish_reason
            if delta.usage is not None:
                trace.prompt_tokens = delta.usage.prompt_tokens
                trace.completion_tokens = delta.usage.completion_tokens
                trace.cached_tokens = delta.usage.cached_tokens
            yield delta
    finally:
        if trace.completion_tokens == 0:
            trace.completion_tokens = trace.deltas
        if trace.first_token is not None:
            trace.add_stage("backend_ttft", trace.backend_start or trace.start,
                            trace.first_token - (trace.backend_start or trace.start))
            trace.add_stage("stream", trace.first_token, (trace.last_token or trace.first_token) - trace.first_token)
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()
