"""uvicorn's httptools protocol, except that a response's head goes out with its first body bytes.

uvicorn writes the status line and headers the moment ``http.response.start`` is sent and the
first body chunk in a second ``write``: two system calls, two TCP segments and, on the other
end, two wake-ups before the client holds its first token. A streamed answer sends its start
and its first chunk back to back (``GenerationResponse`` waits for the first token before it
starts), so holding the head until the next write costs nothing and saves one write and one
segment per response — on the first-token path of every request. ``server.coalesce_writes``
turns it off (uvicorn's own two writes).

Only public extension points are used: the protocol class is passed as uvicorn's ``http=``;
``on_headers_complete`` (a parser callback) lets uvicorn build the request's cycle as usual and
then gives that cycle a ``HeadHolder`` as its ``transport`` and wraps its ``on_response`` (both
attributes the cycle is constructed with). Parsing, flow control, keep-alive and error handling
stay uvicorn's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from blink.gateway.http.http10_framing import close_delimited

# uvicorn's own answer to an app that fails before its response started (``send_500_response``).
_INTERNAL_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
                   b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error")


class HeadHolder:
    """The cycle's transport: holds the response head until the next write, the close or the end.

    The head is the first write once the cycle's response has started (a ``100 Continue``,
    written before that, goes out at once: the client waits for it before sending its body)."""

    __slots__ = ("_transport", "_cycle", "_head", "_head_seen")

    def __init__(self, transport: Any, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        if not self._head_seen and self._cycle.response_started:
            self._head_seen = True
            self._head = data
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        self._transport.write(data)

    def flush(self) -> None:
        """Write a head still held (a response that ended without a body write: 204, HEAD, empty)."""
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def close(self) -> None:
        if self._head is not None and not self._cycle.response_complete:
            # The app failed (or returned) after its start and before any body: nothing of this
            # response has left yet, so the client gets a whole 500, not a head cut short.
            self._head = None
            self._transport.write(_INTERNAL_ERROR)
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return bool(self._transport.is_closing())


def _flushing(holder: HeadHolder, on_response: Callable[[], None]) -> Callable[[], None]:
    def done() -> None:
        holder.flush()
        on_response()

    return done


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """Pass as uvicorn's ``http``: each request's head leaves with its first body bytes (and an
    HTTP/1.0 request's body is close-delimited: ``http10_framing``)."""

    coalesce: ClassVar[bool] = True

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope.get("http_version") == "1.0" and "send" not in vars(cycle):
            cycle.send = close_delimited(cycle)  # type: ignore[method-assign]
        # A WebSocket upgrade returns before a cycle is made: ``cycle`` is then an earlier one
        # (already holding) or None.
        if not self.coalesce or cycle is None or isinstance(cycle.transport, HeadHolder):
            return
        holder = HeadHolder(cycle.transport, cycle)
        cycle.transport = holder  # type: ignore[assignment]
        cycle.on_response = _flushing(holder, cycle.on_response)
