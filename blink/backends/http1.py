"""A small HTTP/1.1 client for one upstream: asyncio Protocols, a keep-alive pool, httptools' parser.

Why not aiohttp: this client is on every proxied request's first-token path, and aiohttp's request
building, header multidicts, connector and payload streams cost several times the CPU of the same
exchange written by hand (benchmarks/RESULTS.md, "Concurrency-1 first-token path"). This client does only what
``OpenAIHTTPBackend`` needs: one host, the request written in one ``write`` (head + body),
``content-length`` and chunked bodies (httptools, the C parser uvicorn uses), keep-alive reuse,
a connect timeout and a read timeout that bounds the gap between two reads (a stall).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

# Above this many unread body bytes the socket stops being read (TCP back-pressure upstream).
_HIGH_WATER = 256 * 1024


class Http1Error(ConnectionError):
    """The upstream broke the exchange: connection lost mid-response or malformed HTTP."""


class Http1ConnectError(ConnectionError):
    """The upstream could not be reached (refused, unresolvable, reset while connecting)."""


class _Connection(asyncio.Protocol):
    """One TCP connection; one response at a time (the parser's callbacks fill it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.error: BaseException | None = None
        self.body: collections.deque[bytes] = collections.deque()
        self._buffered = 0

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(Http1Error("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(Http1Error(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and self._ends_at_close():
            self.complete = True  # a body with neither length nor chunks ends when the connection does
        if not self.complete and self.error is None:
            self.error = Http1Error("the upstream closed the connection before the response ended")
        self._wake()

    def _ends_at_close(self) -> bool:
        return "content-length" not in self.headers and "chunked" not in self.headers.get("transfer-encoding", "")

    # -- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        prev = self.headers.get(key)
        text = value.decode("latin-1")
        self.headers[key] = text if prev is None else f"{prev}, {text}"

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # -- used by the response -----------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        self.close()
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, timeout_s: float | None) -> None:
        """Until the parser has news (headers, body, end, error); TimeoutError after ``timeout_s``."""
        if self.closed and self.error is None and not self.complete:
            raise Http1Error("the connection is closed")
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        # One timer handle per wait, not an ``asyncio.timeout`` (its own object, task lookups and
        # cancel/uncancel bookkeeping): this runs for every read of every stream.
        timer = None if timeout_s is None else loop.call_later(timeout_s, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes:
        """The body bytes received so far (b"" if none)."""
        if not self.body:
            return b""
        data = self.body.popleft() if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def send(self, data: bytes) -> None:
        self._reset()
        if self.transport is None:
            raise Http1Error("the connection is not open")
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Http1Response:
    """Status and headers of an answer; iterate ``chunks()`` or ``read()`` the body, then ``release()``."""

    def __init__(self, pool: Http1Pool, conn: _Connection) -> None:
        self._pool = pool
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self._released = False

    @property
    def at_eof(self) -> bool:
        return self._conn.complete and not self._conn.body

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (de-chunked); raises Http1Error if the body is cut and
        TimeoutError after the pool's read timeout with nothing new."""
        conn = self._conn
        while True:
            data = conn.take()
            if data:
                yield data
                continue
            if conn.complete:
                return
            if conn.error is not None:
                raise conn.error
            await conn.wait(self._pool.read_timeout_s)

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body (or its first ``limit``-odd bytes)."""
        out = bytearray()
        async for data in self.chunks():
            out += data
            if limit is not None and len(out) > limit:
                break
        return bytes(out)

    def release(self) -> None:
        """Give the connection back for reuse if the exchange ended cleanly, else close it
        (an upstream still streaming sees the disconnect and stops generating)."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.complete and conn.keep_alive and conn.error is None and not conn.closed and not conn.body:
            self._pool._put(conn)
        else:
            conn.close()
            self._pool._drop()


class Http1Pool:
    """Keep-alive connections to the one origin of ``base_url``; at most ``max_connections`` open."""

    def __init__(self, base_url: str, *, connect_timeout_s: float, read_timeout_s: float, max_connections: int) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {base_url!r}")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        host = self.host if ":" not in self.host else f"[{self.host}]"
        self._host_header = (host if default_port else f"{host}:{self.port}").encode("latin-1")
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: list[_Connection] = []
        self.connects = 0  # connections opened so far (keep-alive reuse shows as few)
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def request(self, method: str, path: str, headers: bytes, body: bytes = b"") -> Http1Response:
        """Send ``method`` ``prefix + path`` with ``headers`` (pre-encoded ``name: value\\r\\n``
        lines) and ``body``; return once the answer's headers are in."""
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%scontent-length: %d\r\n\r\n" % (
            method.encode(), (self.prefix + path).encode(), self._host_header, headers, len(body)
        )
        if self._slots.locked():  # every connection busy: waiting for one counts as connecting
            async with asyncio.timeout(self.connect_timeout_s):
                await self._slots.acquire()
        else:
            await self._slots.acquire()
        conn: _Connection | None = None
        try:
            while True:
                reused = bool(self._idle)
                conn = self._idle.pop() if reused else await self._connect()
                if conn.closed:  # went away while idle
                    conn = None
                    continue
                conn.send(head + body)
                try:
                    while not conn.headers_done:
                        if conn.error is not None:
                            raise conn.error
                        await conn.wait(self.read_timeout_s)
                except Http1Error:
                    # A reused connection the upstream closed just as we sent: nothing was
                    # answered, so sending again on a fresh one cannot duplicate work.
                    if reused and conn.status == 0:
                        conn.close()
                        conn = None
                        continue
                    raise
                return Http1Response(self, conn)
        except BaseException:
            if conn is not None:
                conn.close()
            self._slots.release()
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    _Connection, self.host, self.port, ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )  # fmt: skip
        except OSError as exc:
            raise Http1ConnectError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self.connects += 1
        return conn

    def _put(self, conn: _Connection) -> None:
        self._slots.release()
        if self._closed:
            conn.close()
        else:
            self._idle.append(conn)

    def _drop(self) -> None:
        self._slots.release()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
