"""Stamp each delta of a backend stream onto the current request's trace.

The response calls ``observe_stream`` once and then ``StreamStamp.on`` for each delta it writes:
a plain call rather than a generator wrapped around the backend's iterator, because every
generator layer costs a resume per token on the hot path. With no trace bound (a caller outside
the HTTP path) there is no stamp and nothing to call.
"""

from __future__ import annotations

import time

from blink.backends.base import Delta, GenerationRequest
from blink.obs.stages import current_trace
from blink.obs.trace import RequestTrace


class StreamStamp:
    __slots__ = ("_trace",)

    def __init__(self, trace: RequestTrace) -> None:
        self._trace = trace

    def on(self, delta: Delta) -> None:
        trace = self._trace
        trace.on_delta(delta.text, bool(delta.token_ids))
        if delta.finish_reason is not None:
            trace.finish_reason = delta.finish_reason
        if delta.usage is not None:
            trace.prompt_tokens = delta.usage.prompt_tokens
            trace.completion_tokens = delta.usage.completion_tokens
            trace.cached_tokens = delta.usage.cached_tokens

    def close(self) -> None:
        """The stream is over (finished, failed or abandoned): record its stages."""
        trace = self._trace
        if trace.completion_tokens == 0:
            trace.completion_tokens = trace.deltas
        if trace.first_token is not None:
            trace.add_stage("backend_ttft", trace.backend_start or trace.start,
                            trace.first_token - (trace.backend_start or trace.start))
            trace.add_stage("stream", trace.first_token, (trace.last_token or trace.first_token) - trace.first_token)


def observe_stream(req: GenerationRequest, backend: str) -> StreamStamp | None:
    trace = current_trace()
    if trace is None:
        return None
    trace.request_id = req.request_id
    trace.model = trace.model or req.model
    trace.backend = backend
    # Not ``req.tier``: that is the client's x-blink-tier header, whatever it says (a model without
    # tiers ignores it). The routed backend annotates the tier it chose.
    trace.max_tokens = req.options.max_tokens
    trace.temperature = req.options.temperature
    trace.top_p = req.options.top_p
    if trace.output is not None:  # prompt logging is on
        trace.prompt = req.messages if req.kind == "chat" else req.prompt
    trace.backend_start = time.perf_counter()
    return StreamStamp(trace)
