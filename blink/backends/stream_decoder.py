"""An upstream's SSE body -> ``Delta``s, decoded as each network read is iterated, with no I/O of its own.

The reading loop lives in ``OpenAIHTTPBackend.stream`` so a delta passes through one async
generator on its way out, not two: each generator layer is a resume per token, and this path
runs once per token of every proxied stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from blink.backends.base import Delta
from blink.backends.native_events import event_object
from blink.backends.openai_chunks import MalformedChunk, deltas_from_chunk
from blink.backends.sse_parser import SSEParser
from blink.protocol.errors import BlinkError, UpstreamError

ErrorFromBody = Callable[[dict[str, Any], int, str, dict[str, str]], BlinkError]


class StreamDecoder:
    """Feed each read; iterate its deltas, each marked ``more`` when the next one is already in
    memory (same read, no I/O between) so the response can write them together.

    Events are decoded one at a time as the caller iterates, and the stream's first delta that
    carries text goes out at once (``more`` off) instead of waiting for the rest of its read:
    at concurrency 1 the first read holds several events, and decoding, routing and encoding them
    all before the first write delayed the first token (benchmarks/RESULTS.md, "Figures behind the code's numbers",
    stream_decoder). ``done`` is set at ``[DONE]``; a malformed or error event ends the read early and sets
    ``error`` (the deltas before it still go out, then the caller raises it)."""

    __slots__ = ("_name", "_kind", "_parser", "_error_from_body", "_first_text", "done", "finished", "error", "events")

    def __init__(self, name: str, kind: str, error_from_body: ErrorFromBody) -> None:
        self._name = name
        self._kind = kind
        self._parser = SSEParser()
        self._error_from_body = error_from_body
        self._first_text = True  # no delta with text went out yet
        self.done = False
        # Some choice sent a finish_reason: a body that ends without [DONE] after it is complete.
        self.finished = False
        self.error: BlinkError | None = None
        self.events = 0  # events read so far (comments are none): the caller's measure of progress

    def feed(self, chunk: bytes) -> Iterator[Delta]:
        """The read's deltas, decoded lazily; iterate it to the end before checking ``done``/``error``."""
        return self._deltas(self._parser.feed(chunk), check_done=True)

    def flush(self) -> Iterator[Delta]:
        """The event left when the body ended without a blank line (raises on a bad one)."""
        return self._deltas(self._parser.flush(), check_done=False)

    def _deltas(self, events: list[bytes], check_done: bool) -> Iterator[Delta]:
        held: Delta | None = None  # the last delta decoded: its ``more`` depends on what follows
        self.events += len(events)
        for data in events:
            if data == b"[DONE]":
                self.done = True
                break
            if check_done:
                try:
                    deltas = self._decode(data)
                except BlinkError as err:
                    self.error = err
                    break
            else:
                deltas = self._decode(data)
            for delta in deltas:
                if delta.finish_reason is not None:
                    self.finished = True
                if held is not None:
                    held.more = True
                    yield held
                    held = None
                if self._first_text and delta.text:
                    self._first_text = False
                    delta.more = False  # the first token is written the moment it is decoded
                    yield delta
                else:
                    held = delta
        if held is not None:
            held.more = False  # the next delta needs another read
            yield held

    def _decode(self, data: bytes) -> list[Delta]:
        obj = event_object(data, self._name)
        if obj.get("object") == "error":  # vLLM <= 0.9 sends its error object flat
            obj = {"error": obj}
        if "error" in obj:
            raise self._error_from_body(obj, 502, self._name, {})
        try:
            return deltas_from_chunk(obj, self._kind)
        except MalformedChunk as exc:
            raise UpstreamError(f"upstream '{self._name}' sent a malformed event ({exc})") from exc
