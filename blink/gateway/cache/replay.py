"""A cache hit delivered exactly like a fresh response: JSON body or SSE chunks + ``[DONE]``.

The chunks go through the same ``ChunkEncoder`` and ``ResponseAggregator`` as a generation,
so a client cannot tell a replay from a live answer except by the ``x-blink-cache`` header.
The request gets a fresh id and ``created``; usage is the original generation's.
"""

from __future__ import annotations

import time

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from blink.backends.base import Delta, GenerationRequest, Usage
from blink.gateway.cache.entry import CachedResponse
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.rendering.streaming import DONE, ChunkEncoder


def cached_deltas(entry: CachedResponse) -> list[Delta]:
    usage = Usage(entry.prompt_tokens, entry.completion_tokens, cached_tokens=entry.prompt_tokens)
    deltas: list[Delta] = []
    for i, c in enumerate(entry.choices):
        deltas.append(Delta(index=i, text=c.text, tool_calls=c.tool_calls))
        deltas.append(Delta(index=i, finish_reason=c.finish_reason))
    deltas[-1].usage = usage
    return deltas


class CachedReplayResponse(Response):
    def __init__(
        self,
        req: GenerationRequest,
        entry: CachedResponse,
        *,
        stream: bool,
        include_usage: bool,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        super().__init__()
        self._req = req
        self._entry = entry
        self._stream = stream
        self._include_usage = include_usage
        self._extra_headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        req = self._req
        deltas = cached_deltas(self._entry)
        headers = [(b"x-request-id", req.request_id.encode()), *self._extra_headers]
        if self._stream:
            enc = ChunkEncoder(req.kind, req.request_id, req.model, int(time.time()), self._include_usage)
            parts = [c for c in (enc.encode(d) for d in deltas) if c is not None]
            if self._include_usage:
                parts.append(enc.usage(deltas[-1].usage))
            parts.append(DONE)
            body = b"".join(parts)
            headers += [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        else:
            agg = ResponseAggregator(req.kind, len(self._entry.choices), False)
            for d in deltas:
                agg.add(d)
            body = orjson.dumps(agg.render(req.request_id, req.model, int(time.time())))
            headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
