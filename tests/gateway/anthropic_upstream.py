"""A fake upstream that serves Anthropic's Messages API itself (as vLLM and LiteLLM do), on a socket.

A request with ``tools`` is answered with a text block and a ``tool_use`` block; one with
``stop_sequences`` ends at the first of them; ``count_tokens`` answers 42. Every body is kept.
"""

from __future__ import annotations

from typing import Any

import orjson
from asgi_parts import read_body, serve_lifespan

COUNT = 42


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


class AnthropicUpstream:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any], dict[bytes, bytes]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        path = scope["path"]
        if scope["method"] == "GET":
            await self._send(send, 200, b"application/json", b'{"object": "list", "data": []}')
            return
        body = orjson.loads(await read_body(receive))
        self.requests.append((path, body, dict(scope["headers"])))
        if path == "/v1/messages/count_tokens":
            await self._send(send, 200, b"application/json", orjson.dumps({"input_tokens": COUNT}))
        elif path == "/v1/messages":
            await self._send(send, 200, b"text/event-stream", b"".join(_event(e) for e in self._events(body)))
        else:
            await self._send(send, 404, b"application/json", b'{"error": {"message": "no such route"}}')

    @staticmethod
    def _events(body: dict[str, Any]) -> list[dict[str, Any]]:
        start = {"type": "message_start", "message": {"id": "msg_up", "type": "message", "role": "assistant",
                                                      "model": body["model"], "content": [], "stop_reason": None,
                                                      "stop_sequence": None,
                                                      "usage": {"input_tokens": 7, "output_tokens": 1}}}
        text = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
                {"type": "content_block_stop", "index": 0}]
        events = [start, {"type": "ping"}, *text]
        if body.get("tools"):
            events += [{"type": "content_block_start", "index": 1, "content_block": {
                           "type": "tool_use", "id": "toolu_up", "name": "forecast", "input": {}}},
                       {"type": "content_block_delta", "index": 1, "delta": {
                           "type": "input_json_delta", "partial_json": '{"unit": "celsius",'}},
                       {"type": "content_block_delta", "index": 1, "delta": {
                           "type": "input_json_delta", "partial_json": ' "hourly": true}'}},
                       {"type": "content_block_stop", "index": 1}]
            reason, sequence = "tool_use", None
        elif body.get("stop_sequences"):
            reason, sequence = "stop_sequence", body["stop_sequences"][0]
        else:
            reason, sequence = "end_turn", None
        return [*events, {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                          "usage": {"output_tokens": 5}}, {"type": "message_stop"}]

    @staticmethod
    async def _send(send: Any, status: int, ctype: bytes, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype)]})
        await send({"type": "http.response.body", "body": body, "more_body": False})
