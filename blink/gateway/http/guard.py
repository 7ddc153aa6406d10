"""Connection-level limits that only the HTTP protocol can enforce: head size, head time, framing.

An ASGI app sees a request only once its head is parsed, so a limit on the head itself (its
size, its header count, how long it takes to arrive), a cap on one address's connections, and
the answer to bytes that are not HTTP at all must live in the protocol. uvicorn's public options
cover none of these for httptools: ``h11_max_incomplete_event_size`` bounds h11 only (and h11
parses slower on the first-token path), ``limit_concurrency`` counts every connection of every
client together and answers after the head was read, and ``timeout_keep_alive`` starts only after
a response. So ``GuardedHttpToolsProtocol`` subclasses uvicorn's httptools protocol class (the
documented ``http=`` extension point takes a protocol class) and overrides its ``asyncio.Protocol``
methods and parser callbacks, calling uvicorn's own for everything else:

- bytes of a request head are counted in ``data_received`` *before* the parser sees them; past
  ``max_header_bytes`` (or ``max_header_count`` lines) the client gets 431 and the connection
  closes, so a 128 MiB header is never parsed and never holds the event loop;
- a head that is not complete ``header_timeout_s`` after its first byte gets 408 and the
  connection closes; a new connection that sends nothing for that long is closed silently;
- an oversize or malformed head's answer is followed by a lingering close without reading: the
  sending side is shut (the client reads the answer, then EOF, never a reset) and the connection is held,
  unread, for ``refused_linger_s`` before it closes. Reading nothing costs nothing, and a client
  that keeps sending its bomb waits on its own full socket buffer instead of opening the next
  connection at once. Held connections are counted apart from open ones, under the same
  per-address cap (an address's other clients keep their places); past it a refusal closes at once;
- a connection from an address that already holds ``max_connections_per_client`` gets 429 +
  ``retry-after`` at once and the same lingering close, counted as held (it takes no open place):
  closing at once turned the request a client sends right after connecting into a reset that
  destroyed the unread 429 (async clients in a burst saw connection errors, not the answer); these
  refusals are logged once per address per ``_REFUSAL_LOG_S``, with a count, not per connection;
- malformed framing gets uvicorn's 400, but as OpenAI-style JSON (``send_400_response``);
- a body the app answered without reading (a 401, a 404) may trickle on for at most
  ``body_timeout_s`` after the response before the connection closes (uvicorn would read it for
  as long as it keeps coming: each byte resets its keep-alive timer).

Body limits (size, deadline, the concurrency slot taken only once the body is in) are ASGI
middleware in ``edge_limits.py``: they need no protocol hooks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from blink.config.server import ServerSettings
from blink.gateway.http.uvicorn_protocol import CoalescingHttpToolsProtocol
from blink.protocol.errors import (
    BlinkError,
    HeaderFieldsTooLargeError,
    InvalidRequestError,
    RequestTimeoutError,
    TooManyConnectionsError,
)

log = logging.getLogger("blink.gateway.http")
# A refused client retries after a second: long enough for its other connections to finish a request.
_RETRY_AFTER_S = "1"
# A flood of refused connections logs one line per address this often (with a count), not one
# per connection: formatting and writing a log line costs as much as the refusal itself.
_REFUSAL_LOG_S = 10.0
# Addresses remembered for that before the ones quiet for a whole period are forgotten.
_REFUSAL_LOG_ADDRESSES = 1024
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 429: b"Too Many Requests",
            431: b"Request Header Fields Too Large"}


def raw_error_response(err: BlinkError) -> bytes:
    """A whole HTTP/1.1 response carrying ``err`` as OpenAI-style JSON, with ``connection: close``."""
    body = orjson.dumps(err.body())
    head = [b"HTTP/1.1 %d %s\r\n" % (err.status, _REASONS.get(err.status, b"Error")),
            b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n"]
    head += [k.lower().encode("latin-1") + b": " + v.encode("latin-1") + b"\r\n" for k, v in err.headers.items()]
    return b"".join([*head, b"\r\n", body])


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_header_bytes: int
    max_header_count: int
    header_timeout_s: float
    body_timeout_s: float
    max_connections_per_client: int  # 0 = no cap
    refused_linger_s: float = 0.0

    @classmethod
    def from_settings(cls, s: ServerSettings) -> HttpLimits:
        return cls(int(s.max_header_bytes), s.max_header_count, s.header_timeout_s, s.body_timeout_s,
                   s.max_connections_per_client, s.refused_linger_s)


@dataclass(slots=True)
class ClientConnections:
    """Open connections per client address, shared by every connection of one server."""

    limit: int
    open: Counter[str] = field(default_factory=Counter)
    # Refused connections held unread for the lingering close, counted apart under the same cap:
    # they never take an open place from the address's other clients, and never pile up.
    held: Counter[str] = field(default_factory=Counter)
    # Refusals over the cap not yet logged, and when each address's last line was written.
    refused: Counter[str] = field(default_factory=Counter)
    logged_at: dict[str, float] = field(default_factory=dict)

    def acquire(self, address: str) -> bool:
        if self.limit and self.open[address] >= self.limit:
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]

    def hold(self, address: str) -> bool:
        """Move one of ``address``'s open connections to the held ones; False if those are at the cap."""
        if not self.hold_refused(address):
            return False
        self.release(address)
        return True

    def hold_refused(self, address: str) -> bool:
        """Count a connection refused over the cap (it never had an open place) as held; False at the cap."""
        if self.limit and self.held[address] >= self.limit:
            return False
        self.held[address] += 1
        return True

    def unhold(self, address: str) -> None:
        self.held[address] -= 1
        if self.held[address] <= 0:
            del self.held[address]

    def refusal_to_log(self, address: str, now: float) -> int:
        """Count a refusal; the number to log now (0 = stay quiet: one line per address per period)."""
        self.refused[address] += 1
        if now - self.logged_at.get(address, -_REFUSAL_LOG_S) < _REFUSAL_LOG_S:
            return 0
        if len(self.logged_at) >= _REFUSAL_LOG_ADDRESSES:  # bounded under a flood from many addresses
            self.logged_at = {a: t for a, t in self.logged_at.items() if now - t < _REFUSAL_LOG_S}
            if len(self.logged_at) >= _REFUSAL_LOG_ADDRESSES:  # all recent: forget them all
                self.logged_at.clear()
            self.refused = Counter({a: n for a, n in self.refused.items() if a in self.logged_at or a == address})
        self.logged_at[address] = now
        return self.refused.pop(address)


class GuardedHttpToolsProtocol(CoalescingHttpToolsProtocol):
    """uvicorn's httptools protocol with head limits, a head deadline and a per-address cap.

    Use ``guarded_protocol(settings)``: it binds ``limits`` and ``clients`` (state shared by the
    connections of one server) on a subclass, so two servers in one process never share counts.
    """

    limits: ClassVar[HttpLimits]
    clients: ClassVar[ClientConnections]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes belong to a request head
        self._head_bytes = 0
        self._header_count = 0
        self._head_over = False  # set by ``on_header``; the parser error it raises becomes a 431
        self._head_timer: asyncio.TimerHandle | None = None
        self._unread_timer: asyncio.TimerHandle | None = None  # a body still arriving after its response
        self._address: str | None = None  # counted in ``clients`` while set
        self._linger_timer: asyncio.TimerHandle | None = None  # a refused connection held unread
        self._held: str | None = None  # counted in ``clients.held`` while set
        self._over_cap: str | None = None  # refused over the per-address cap (no open place taken)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        if not self.clients.acquire(address):
            if count := self.clients.refusal_to_log(address, self.loop.time()):
                log.warning("refused %d connection(s) from %s: over %d open connections",
                            count, address, self.clients.limit)
            self._over_cap = address
            self._refuse(TooManyConnectionsError(
                f"Too many open connections from this address (limit {self.clients.limit}); retry shortly.",
                headers={"retry-after": _RETRY_AFTER_S}))
            return
        self._address = address
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_unread_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        if self._held is not None:
            self.clients.unhold(self._held)
            self._held = None
        if self._address is not None:
            self.clients.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing() or self._linger_timer is not None:
            return
        if not self._in_head:
            super().data_received(data)
            return
        if self._head_timer is None:  # the first byte of the next request on a kept-alive connection
            self._arm_head_timer()
        room = self.limits.max_header_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        head = data[:room]
        self._head_bytes += len(head)
        if head:
            super().data_received(head)
        if self.transport.is_closing() or self._linger_timer is not None:
            return
        if self._in_head:  # the head is still not complete past the limit: never parse (or copy) the rest
            self._refuse(self._too_large())
            return
        self.data_received(data[room:])  # the body (or a pipelined request) after a head that fit

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_header_count:
            self._head_over = True
            raise HeaderFieldsTooLargeError("too many header lines")  # httptools turns it into a parser error
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # what follows is the next request's head
        self._cancel_unread_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._in_head and self._unread_timer is None and not self.transport.is_closing():
            self._unread_timer = self.loop.call_later(self.limits.body_timeout_s, self._unread_timed_out)

    def _unread_timed_out(self) -> None:
        self._unread_timer = None
        if not self._in_head:
            self.transport.close()

    def _cancel_unread_timer(self) -> None:
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes the transport over and gets ``connection_lost``, not this
        # object: release the address here (WebSockets are bounded by the voice service instead).
        if self._address is not None:
            self.clients.release(self._address)
            self._address = None
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes httptools cannot parse, as JSON (and 431 for a head over the count)."""
        if self._head_over:
            self._refuse(self._too_large())
            return
        self._refuse(InvalidRequestError("Invalid HTTP request: the request could not be parsed.",
                                         code="invalid_http_request"))

    def _too_large(self) -> HeaderFieldsTooLargeError:
        return HeaderFieldsTooLargeError(
            f"Request headers exceed the limit of {self.limits.max_header_bytes} bytes "
            f"or {self.limits.max_header_count} header lines.")

    def _refuse(self, err: BlinkError, linger: bool = True) -> None:
        """Answer ``err`` without involving the app and close; a request already in the app sees a disconnect.

        With ``linger`` (and an answer written), the close is a lingering one without reading
        (see the module docstring): shut the sending side, stop reading, close later.
        """
        self._cancel_head_timer()
        if self.transport.is_closing() or self._linger_timer is not None:
            return
        answered = self.cycle is None or self.cycle.response_complete or not self.cycle.response_started
        if answered:
            self.transport.write(raw_error_response(err))
        wait = self.limits.refused_linger_s
        if not (linger and answered and wait > 0 and self.transport.can_write_eof() and self._hold()):
            self.transport.close()
            return
        self.transport.write_eof()
        self.transport.pause_reading()
        self._linger_timer = self.loop.call_later(wait, self.transport.close)

    def _hold(self) -> bool:
        """Count this connection as held (not open) for its address; False when that is at the cap."""
        address = self._address
        if address is None:
            if self._over_cap is None:
                return True  # no cap to count against
            if not self.clients.hold_refused(self._over_cap):
                return False
            self._held = self._over_cap
            return True
        if not self.clients.hold(address):
            return False
        self._address, self._held = None, address
        return True

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head:
            return
        if self._head_bytes == 0:
            # A connection that never sent a byte (a browser's preconnect) is closed without an
            # answer: a client reusing it at that instant would read a 408 meant for nobody.
            self.transport.close()
        else:
            # No linger: a slow head already took header_timeout_s of the client's time.
            self._refuse(RequestTimeoutError(
                f"The request head did not arrive within {self.limits.header_timeout_s:g} s."), linger=False)


def guarded_protocol(settings: ServerSettings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to pass as uvicorn's ``http=``, bound to ``settings``' limits."""
    limits = HttpLimits.from_settings(settings)
    return type("BoundGuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,),
                {"limits": limits, "clients": ClientConnections(limits.max_connections_per_client),
                 "coalesce": settings.coalesce_writes})
