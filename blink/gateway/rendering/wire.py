"""What one API puts on the wire for a generation: the seam between running it and rendering it.

``GenerationResponse`` owns everything about running a generation once (disconnect -> abort, the
timeout, keep-alive while the first token is pending, the lease, the stream metrics, the cache
fill, JSON errors before the first byte). Each API (chat/completions chunks, Anthropic Messages,
the Responses API) supplies only a ``WireFormat``: the bytes of its event stream and the body of
its whole answer. Keeping the loop in one place is what keeps the three APIs' failure handling
identical, and a new API one class.
"""

from __future__ import annotations

import time
from typing import Protocol

import orjson

from blink.backends.base import Delta, GenerationRequest, Usage
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.rendering.streaming import DONE, KEEP_ALIVE, ChunkEncoder, error_event
from blink.protocol.errors import BlinkError


class WireFormat(Protocol):
    """One response's rendering. Streamed: ``opening`` + ``encode`` per delta + ``closing`` (or
    ``failure`` once bytes went out). Whole: ``add`` per delta, then ``whole``."""

    #: SSE bytes sent every few seconds while the first token is pending (headers already out).
    keep_alive: bytes

    def prepare(self) -> None:
        """Called while the backend is being asked: render ahead what does not need the answer."""

    def opening(self, first: Delta | None) -> bytes:
        """The bytes that open the stream, written with ``first``'s (None: an empty answer)."""

    def encode(self, delta: Delta) -> bytes:
        """The events ``delta`` adds to the stream (may be empty)."""

    async def closing(self) -> bytes:
        """The stream's last events, after the last delta (may store the answer first)."""

    def failure(self, err: BlinkError) -> bytes:
        """The events that end a started stream that failed: the client must see it failed."""

    def add(self, delta: Delta) -> None:
        """Follow one delta of a non-streamed answer."""

    async def whole(self, agg: ResponseAggregator) -> bytes:
        """The non-streamed answer's JSON body (``agg`` holds every delta)."""


class ChatWire:
    """OpenAI's ``chat.completion.chunk`` / ``text_completion`` events and whole objects."""

    __slots__ = ("_req", "_enc", "_include_usage", "_usage")

    keep_alive = KEEP_ALIVE

    def __init__(self, req: GenerationRequest, include_usage: bool) -> None:
        self._req = req
        self._include_usage = include_usage
        self._enc: ChunkEncoder | None = None
        self._usage: Usage | None = None

    def prepare(self) -> None:
        pass

    def opening(self, first: Delta | None) -> bytes:
        req = self._req
        self._enc = ChunkEncoder(req.kind, req.request_id, req.model, int(time.time()), self._include_usage,
                                 continuous_usage=_continuous_usage(req),
                                 return_token_ids=req.options.return_token_ids, n=req.options.n)
        return b""

    def encode(self, delta: Delta) -> bytes:
        if delta.usage is not None:
            self._usage = delta.usage
        chunk = self._enc.encode(delta) if self._enc is not None else None
        return chunk or b""

    async def closing(self) -> bytes:
        if self._include_usage and self._enc is not None:
            return self._enc.usage(self._usage) + DONE
        return DONE

    def failure(self, err: BlinkError) -> bytes:
        return error_event(err)

    def add(self, delta: Delta) -> None:
        pass

    async def whole(self, agg: ResponseAggregator) -> bytes:
        return orjson.dumps(agg.render(self._req.request_id, self._req.model, int(time.time())))


def _continuous_usage(req: GenerationRequest) -> bool:
    """vLLM's ``stream_options.continuous_usage_stats`` (validated by the protocol). It adds to
    ``include_usage`` and means nothing without it: vLLM then sends no usage at all."""
    opts = req.extra.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("continuous_usage_stats")) and bool(opts.get("include_usage"))
