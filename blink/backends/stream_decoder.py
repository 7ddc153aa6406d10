"""An upstream's SSE body -> ``Delta`` lists, one list per network read, with no I/O of its own.

The reading loop lives in ``OpenAIHTTPBackend.stream`` so a delta passes through one async
generator on its way out, not two: each generator layer is a resume per token, and this path
runs once per token of every proxied stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from blink.backends.base import Delta
from blink.backends.openai_chunks import deltas_from_chunk
from blink.backends.sse_parser import SSEParser
from blink.protocol.errors import BlinkError, UpstreamError

ErrorFromBody = Callable[[dict[str, Any], int, str, dict[str, str]], BlinkError]


class StreamDecoder:
    """Feed each read; get its deltas, all but the last marked ``more`` (same read, no I/O between).

    ``done`` is set at ``[DONE]``; a malformed or error event ends the list early and sets
    ``error`` (the deltas before it still go out, then the caller raises it)."""

    __slots__ = ("_name", "_kind", "_parser", "_error_from_body", "done", "finished", "error")

    def __init__(self, name: str, kind: str, error_from_body: ErrorFromBody) -> None:
        self._name = name
        self._kind = kind
        self._parser = SSEParser()
        self._error_from_body = error_from_body
        self.done = False
        # Some choice sent a finish_reason: a body that ends without [DONE] after it is complete.
        self.finished = False
        self.error: BlinkError | None = None

    def feed(self, chunk: bytes) -> list[Delta]:
        out: list[Delta] = []
        for data in self._parser.feed(chunk):
            if data == b"[DONE]":
                self.done = True
                break
            try:
                out += self._decode(data)
            except BlinkError as err:
                self.error = err
                break
        return self._mark(out)

    def flush(self) -> list[Delta]:
        """The event left when the body ended without a blank line (raises on a bad one)."""
        out: list[Delta] = []
        for data in self._parser.flush():
            if data == b"[DONE]":
                self.done = True
                return []
            out += self._decode(data)
        return self._mark(out)

    def _mark(self, out: list[Delta]) -> list[Delta]:
        for delta in out:
            if delta.finish_reason is not None:
                self.finished = True
            delta.more = True
        if out:
            out[-1].more = False  # the next delta needs another read
        return out

    def _decode(self, data: bytes) -> list[Delta]:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(f"upstream '{self._name}' sent an unparseable event: {data[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise UpstreamError(f"upstream '{self._name}' sent a non-object event")
        if obj.get("object") == "error":  # vLLM <= 0.9 sends its error object flat
            obj = {"error": obj}
        if "error" in obj:
            raise self._error_from_body(obj, 502, self._name, {})
        return deltas_from_chunk(obj, self._kind)
