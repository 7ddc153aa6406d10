"""The skeleton shared by the decoders of an upstream's native event streams (Messages, Responses).

An upstream that serves ``/v1/messages`` or ``/v1/responses`` itself answers in its own events;
each becomes the deltas a chat stream gives, so the gateway renders every answer one way. What is
common (the SSE framing, JSON per event, the state ``OpenAIHTTPBackend.stream`` reads: ``done``,
``finished``, ``error``, the write-together ``more`` flags) lives here once; each API supplies only
``event``, its event -> deltas mapping. Same interface as ``StreamDecoder``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from blink.backends.base import Delta
from blink.backends.sse_parser import SSEParser
from blink.protocol.errors import BlinkError, UpstreamError


class NativeEventDecoder:
    __slots__ = ("_name", "_parser", "done", "finished", "error", "events")

    def __init__(self, name: str) -> None:
        self._name = name
        self._parser = SSEParser()
        self.done = False  # the stream's last event came (the body may be drained and released)
        self.finished = False  # the answer's finish reason came
        self.error: BlinkError | None = None
        self.events = 0  # events read so far (comments are none): the caller's measure of progress

    def feed(self, chunk: bytes) -> Iterator[Delta]:
        return self._deltas(self._parser.feed(chunk))

    def flush(self) -> Iterator[Delta]:
        return self._deltas(self._parser.flush())

    def event(self, obj: dict[str, Any]) -> list[Delta]:
        """The deltas of one decoded event; raises ``UpstreamError`` for an upstream's failure event."""
        raise NotImplementedError

    def _deltas(self, payloads: list[bytes]) -> Iterator[Delta]:
        out: list[Delta] = []
        self.events += len(payloads)
        for data in payloads:
            if self.done or self.error is not None:
                break
            try:
                out += checked_deltas(self._name, self.event, event_object(data, self._name))
            except BlinkError as err:
                self.error = err
                break
        # Deltas read together go out in one write (the last one says when to write).
        for i, delta in enumerate(out):
            delta.more = i < len(out) - 1
        return iter(out)



def checked_deltas(name: str, decode: Callable[..., Iterable[Delta]], *args: Any) -> list[Delta]:
    """The deltas ``decode(*args)`` reads from upstream ``name``'s event or answer, each field of its type.

    An upstream is outside our control: an event of the wrong shape (a number for a text, a string
    for a block) is an ``UpstreamError`` here rather than a value that fails in a renderer (a 500,
    or a stream cut without its closing events)."""
    try:
        deltas = list(decode(*args))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        raise UpstreamError(f"upstream '{name}' sent a malformed event ({type(exc).__name__}: {exc})") from exc
    for d in deltas:
        if not (isinstance(d.text, str) and isinstance(d.index, int)
                and (d.finish_reason is None or isinstance(d.finish_reason, str))
                and (d.usage is None or all(isinstance(n, int) for n in (d.usage.prompt_tokens,
                                                                          d.usage.completion_tokens,
                                                                          d.usage.cached_tokens)))
                and all(_call_fragment_ok(c) for c in d.tool_calls or ())):
            raise UpstreamError(f"upstream '{name}' sent a malformed event (a field of the wrong type)")
    return deltas


def _call_fragment_ok(fragment: Any) -> bool:
    if not isinstance(fragment, dict):
        return False
    fn = fragment.get("function") or {}
    return (isinstance(fn, dict) and all(isinstance(fn.get(k, ""), str) for k in ("name", "arguments"))
            and isinstance(fragment.get("id", ""), str))


def event_object(data: bytes, name: str) -> dict[str, Any]:
    """One SSE event's JSON object from upstream ``name``; an ``UpstreamError`` when it is not one."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"upstream '{name}' sent an unparseable event: {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise UpstreamError(f"upstream '{name}' sent a non-object event")
    return obj
