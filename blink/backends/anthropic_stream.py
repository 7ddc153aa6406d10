"""An upstream's Anthropic Messages answer -> ``Delta``s (for upstreams that serve /v1/messages natively).

The gateway's renderer speaks deltas whatever the upstream spoke, so a passed-through Messages
request comes back as the same deltas a translated one gives: text, OpenAI-shaped tool-call
fragments (a ``tool_use`` block's start carries id and name, its ``input_json_delta`` the
arguments), and the stop reason mapped back (``stop_sequence`` keeps the string that matched).
The SSE/JSON skeleton is ``NativeEventDecoder``'s (``native_events.py``), so
``OpenAIHTTPBackend.stream`` reads every decoder with one loop.
"""

from __future__ import annotations

from typing import Any

import orjson

from blink.backends.base import Delta, Usage
from blink.backends.native_events import NativeEventDecoder
from blink.protocol.errors import UpstreamError

# Anthropic's stop reasons as the finish reasons the renderer maps back.
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
           "refusal": "content_filter", "pause_turn": "stop"}


class AnthropicStreamDecoder(NativeEventDecoder):
    __slots__ = ("_calls", "_usage")

    def __init__(self, name: str) -> None:
        super().__init__(name)
        # Content block index -> tool-call index, for the tool_use blocks seen so far.
        self._calls: dict[int, int] = {}
        self._usage = Usage()

    def event(self, obj: dict[str, Any]) -> list[Delta]:
        """The deltas of one decoded event (also used for a whole message's parts)."""
        kind = obj.get("type")
        if kind == "message_start":
            self._count((obj.get("message") or {}).get("usage"))
        elif kind == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                k = self._calls[obj.get("index", 0)] = len(self._calls)
                return [Delta(tool_calls=[{"index": k, "id": block.get("id"), "type": "function",
                                           "function": {"name": block.get("name", ""), "arguments": ""}}])]
            if block.get("type") == "text" and block.get("text"):
                return [Delta(text=block["text"])]
        elif kind == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta":
                return [Delta(text=delta.get("text") or "")]
            if delta.get("type") == "input_json_delta" and obj.get("index", 0) in self._calls:
                k = self._calls[obj.get("index", 0)]
                return [Delta(tool_calls=[{"index": k, "function": {"arguments": delta.get("partial_json") or ""}}])]
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            self._count(obj.get("usage"))
            self.finished = True
            reason = delta.get("stop_reason")
            return [Delta(finish_reason=_FINISH.get(reason or "", "stop"), usage=self._usage,
                          stop_reason=delta.get("stop_sequence") if reason == "stop_sequence" else None)]
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            err = obj.get("error") or {}
            raise UpstreamError(f"upstream '{self._name}' failed mid-stream: {err.get('message') or err}")
        return []

    def _count(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        u = self._usage
        cached = usage.get("cache_read_input_tokens")
        if usage.get("input_tokens") is not None:
            u.prompt_tokens = int(usage["input_tokens"]) + int(cached or 0) + int(usage.get("cache_creation_input_tokens") or 0)
        if cached is not None:
            u.cached_tokens = int(cached)
        if usage.get("output_tokens") is not None:
            u.completion_tokens = int(usage["output_tokens"])


def deltas_from_message(obj: dict[str, Any], name: str) -> list[Delta]:
    """A whole ``message`` object (an upstream that ignored ``stream``) as deltas."""
    dec = AnthropicStreamDecoder(name)
    out = dec.event({"type": "message_start", "message": obj})
    for i, block in enumerate(obj.get("content") or ()):
        if block.get("type") == "tool_use":
            out += dec.event({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            out += dec.event({"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": orjson.dumps(block.get("input") or {}).decode()}})
        else:
            out += dec.event({"type": "content_block_start", "index": i, "content_block": block})
    out += dec.event({"type": "message_delta", "delta": {"stop_reason": obj.get("stop_reason"),
                                                         "stop_sequence": obj.get("stop_sequence")},
                      "usage": obj.get("usage")})
    return out
