"""Deltas -> Anthropic Messages responses: one ``message`` object, or its SSE event sequence.

``MessagesEncoder`` is the whole mapping, used by the live response and by a cache replay alike:
text deltas become a ``text`` block (``text_delta``), each tool call a ``tool_use`` block whose
arguments stream as ``input_json_delta``; the finish reason becomes ``stop_reason``
(``end_turn`` / ``max_tokens`` / ``stop_sequence`` with the matched ``stop_sequence`` /
``tool_use``). It is the Messages API's ``WireFormat``: ``GenerationResponse`` (disconnect, timeout,
keep-alive, lease, metrics stamp, completion hooks) runs the generation with it in place of OpenAI's
chunks; a failure after the first event ends the stream with Anthropic's ``error`` event, never a
silent end.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from blink.backends.base import Delta, GenerationRequest, Usage
from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.replay import cached_deltas
from blink.gateway.messages.errors import anthropic_error_of
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.protocol.errors import BlinkError

PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(err: BlinkError) -> bytes:
    """Anthropic's ``error`` event: the SDK raises on it, so a failed stream never looks complete."""
    return _event("error", anthropic_error_of(err))


class MessagesEncoder:
    """One request's deltas (a single choice) as Anthropic events, and as the final message: the
    Messages API's ``WireFormat`` for ``GenerationResponse``, and the renderer of a cache replay."""

    keep_alive = PING  # Anthropic's ``ping`` event while the first token is pending (the SDK skips it)

    def __init__(self, req: GenerationRequest) -> None:
        self._req = req
        self._stops = req.options.stop
        self._blocks: list[dict[str, Any]] = []
        # The open block's index in ``_blocks`` and its kind ("text" or "tool_use"), or None.
        self._open: str | None = None
        self._args: list[str] = []
        self._called = False
        self._finish: str | None = None
        self._stop_string: str | None = None
        self._prompt_tokens: int | None = None
        self.usage: Usage | None = None

    # -- streaming (``WireFormat``) ---------------------------------------------------------------

    def prepare(self) -> None:
        pass

    def opening(self, first: Delta | None) -> bytes:
        """``message_start``: after the first delta, which may carry the prompt's size."""
        if first is not None and first.prompt_token_ids is not None and self._prompt_tokens is None:
            self._prompt_tokens = len(first.prompt_token_ids)
        return self.start()

    async def closing(self) -> bytes:
        return self.end()

    def failure(self, err: BlinkError) -> bytes:
        return error_event(err)

    def start(self) -> bytes:
        usage = {"input_tokens": self._prompt_tokens or 0, "output_tokens": 0}
        message = {"id": self._req.request_id, "type": "message", "role": "assistant", "model": self._req.model,
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        return _event("message_start", {"type": "message_start", "message": message})

    def encode(self, d: Delta) -> bytes:
        """The events ``d`` adds (possibly none); also kept for ``message()``."""
        out: list[bytes] = []
        if d.prompt_token_ids is not None and self._prompt_tokens is None:
            self._prompt_tokens = len(d.prompt_token_ids)
        if d.text:
            if self._open != "text":
                self._open_block(out, {"type": "text", "text": ""})
            self._blocks[-1]["text"] += d.text
            out.append(self._delta({"type": "text_delta", "text": d.text}))
        for frag in d.tool_calls or ():
            fn = frag.get("function") or {}
            if frag.get("id") or fn.get("name"):
                self._called = True
                self._open_block(out, {"type": "tool_use", "id": frag.get("id") or self._req.request_id,
                                       "name": fn.get("name") or "", "input": {}})
            args = fn.get("arguments")
            if args and self._open == "tool_use":
                self._args.append(args)
                out.append(self._delta({"type": "input_json_delta", "partial_json": args}))
        if d.finish_reason is not None:
            self._finish = d.finish_reason
            self._stop_string = d.stop_reason
        if d.usage is not None:
            self.usage = d.usage
        return b"".join(out)

    def end(self) -> bytes:
        """``content_block_stop`` of the open block, ``message_delta`` and ``message_stop``."""
        out: list[bytes] = []
        self._close_block(out)
        reason, sequence = self._stop()
        out.append(_event("message_delta", {"type": "message_delta",
                                            "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                            "usage": self._usage()}))
        out.append(_event("message_stop", {"type": "message_stop"}))
        return b"".join(out)

    # -- whole ---------------------------------------------------------------------------------

    def add(self, delta: Delta) -> None:
        self.encode(delta)

    async def whole(self, agg: ResponseAggregator) -> bytes:
        return orjson.dumps(self.message())

    def message(self) -> dict[str, Any]:
        self._close_block([])
        reason, sequence = self._stop()
        return {"id": self._req.request_id, "type": "message", "role": "assistant", "model": self._req.model,
                "content": self._blocks, "stop_reason": reason, "stop_sequence": sequence, "usage": self._usage()}

    # -- helpers -------------------------------------------------------------------------------

    def _open_block(self, out: list[bytes], block: dict[str, Any]) -> None:
        self._close_block(out)
        self._blocks.append(block)
        self._open = block["type"]
        out.append(_event("content_block_start", {"type": "content_block_start", "index": len(self._blocks) - 1,
                                                  "content_block": block.copy()}))

    def _close_block(self, out: list[bytes]) -> None:
        if self._open is None:
            return
        if self._open == "tool_use":
            self._blocks[-1]["input"] = _arguments("".join(self._args))
            self._args = []
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": len(self._blocks) - 1}))
        self._open = None

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": len(self._blocks) - 1,
                                              "delta": delta})

    def _stop(self) -> tuple[str, str | None]:
        if self._called and self._finish in ("stop", "tool_calls"):
            return "tool_use", None
        if self._finish == "stop" and self._stop_string is not None and self._stop_string in self._stops:
            return "stop_sequence", self._stop_string
        return _STOP_REASONS.get(self._finish or "", "end_turn"), None

    def _usage(self) -> dict[str, int]:
        u = self.usage or Usage()
        prompt = u.prompt_tokens or self._prompt_tokens or 0
        # Anthropic counts cache reads apart from (not inside) input_tokens.
        return {"input_tokens": prompt - u.cached_tokens, "output_tokens": u.completion_tokens,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": u.cached_tokens}


def _arguments(text: str) -> Any:
    """A call's streamed arguments as the ``input`` object (``{}`` for none)."""
    if not text.strip():
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # cut short or nested too deep: the client still sees what was written
        return {"_raw_arguments": text}


class MessagesReplayResponse(Response):
    """A cache hit rendered exactly like a live Messages answer (fresh id, the original usage)."""

    def __init__(self, req: GenerationRequest, entry: CachedResponse, *, stream: bool,
                 headers: list[tuple[bytes, bytes]]) -> None:
        super().__init__()
        self._req = req
        self._entry = entry
        self._stream = stream
        self._extra = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        enc = MessagesEncoder(self._req)
        deltas = cached_deltas(self._entry)
        headers = [(b"x-request-id", self._req.request_id.encode()), *self._extra]
        if self._stream:
            body = enc.start() + b"".join(enc.encode(d) for d in deltas) + enc.end()
            headers += [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        else:
            for d in deltas:
                enc.encode(d)
            body = orjson.dumps(enc.message())
            headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
