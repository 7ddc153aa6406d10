"""uvicorn's httptools protocol, except that a response's head goes out with its first body bytes.

uvicorn writes the status line and headers the moment ``http.response.start`` is sent and the
first body chunk in a second ``write``: two system calls, two TCP segments and, on the other
end, two wake-ups before the client holds its first token. A streamed answer sends its start
and its first chunk back to back (``GenerationResponse`` waits for the first token before it
starts), so holding the start until the next message costs nothing and saves one write and one
segment per response — on the first-token path of every request.

Only the cycle's ``send`` changes; parsing, flow control, keep-alive and error handling stay
uvicorn's own. The hook is ``HttpToolsProtocol._start_asgi_task`` (uvicorn >= 0.30): if a
later uvicorn stops calling it, responses go out as before (two writes), and
``tests/gateway/test_http_protocol.py`` fails.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _WriteBuffer:
    """Stands in for the transport while a held head and a body are written: one ``write``."""

    __slots__ = ("_transport", "_parts", "_close")

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._parts: list[bytes] = []
        self._close = False

    def write(self, data: bytes) -> None:
        self._parts.append(data)

    def close(self) -> None:
        self._close = True

    def is_closing(self) -> bool:
        return bool(self._transport.is_closing())

    def flush(self) -> None:
        if self._parts:
            self._transport.write(b"".join(self._parts))
        if self._close:
            self._transport.close()


class CoalescingCycle(RequestResponseCycle):
    """Holds ``http.response.start`` until the next message, then writes both at once."""

    _held: Any = None

    async def send(self, message: Any) -> None:
        held, self._held = self._held, None
        if message["type"] == "http.response.start" and not self.response_started and not self.disconnected:
            self._held = message  # a second start (uvicorn's own 500 after an app error) replaces the first
            return
        if held is None:
            await super().send(message)
            return
        transport = self.transport
        buffer = _WriteBuffer(transport)
        self.transport = buffer
        try:
            await super().send(held)
            await super().send(message)
        finally:
            self.transport = transport
            buffer.flush()


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """Pass as uvicorn's ``http``: every request's cycle is a ``CoalescingCycle``."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        cycle.__class__ = CoalescingCycle
        super()._start_asgi_task(cycle, app)
