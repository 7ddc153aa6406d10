"""The ASGI response that runs one generation and delivers it as SSE or as one JSON body.

Headers wait for the first delta, so anything that fails before it (context too long,
upstream 4xx, backend down) is a proper JSON error with the right status. After the first
delta a failure ends the stream with an SSE error event, never a silent truncation. A
client disconnect cancels the generation at once and closes the backend's iterator. Each API
(chat chunks, Anthropic Messages, the Responses API) only supplies its ``WireFormat`` (``wire.py``):
the loop below is the one all three run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from blink.backends.base import Delta, GenerationRequest, StreamSource, Usage
from blink.gateway.http.errors import error_messages
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.rendering.wire import ChatWire, WireFormat
from blink.obs.deltas import StreamStamp, observe_stream
from blink.obs.metrics import GatewayMetrics
from blink.obs.stages import record_error
from blink.obs.trace import CLIENT_CLOSED
from blink.protocol.errors import BackendTimeoutError, BlinkError, InternalServerError

log = logging.getLogger("blink.gateway")

# SSE comment interval while the first token is pending: well inside the 60 s idle timeouts of
# nginx (proxy_read_timeout) and common load balancers, rare enough to cost nothing.
_KEEPALIVE_S = 15.0


class GenerationResponse(Response):
    def __init__(
        self,
        backend: StreamSource,
        req: GenerationRequest,
        *,
        stream: bool,
        include_usage: bool,
        t0: float,
        metrics: GatewayMetrics,
        timeout_s: float | None,
        on_complete: Callable[[ResponseAggregator], None] | None = None,
        on_abandon: Callable[[ResponseAggregator], None] | None = None,
        extra_headers: list[tuple[bytes, bytes]] | None = None,
        usage_headers: Callable[[Usage | None], list[tuple[bytes, bytes]]] | None = None,
        keepalive_s: float | None = _KEEPALIVE_S,
        on_close: Callable[[], None] | None = None,
        wire: WireFormat | None = None,
    ) -> None:
        super().__init__()
        # What goes on the wire (chat chunks unless the route's API renders otherwise).
        self._wire: WireFormat = wire if wire is not None else ChatWire(req, include_usage)
        # Called once the response ended in any way (delivered, failed, timed out, client gone):
        # gives back what admission held for it (the key's sequence lease).
        self._on_close = on_close
        # A stream whose first token takes longer than this starts with SSE comments (headers
        # sent, so a failure after that is an SSE error event rather than a JSON status).
        self._keepalive_s = keepalive_s
        # Called with the whole response once it was delivered in full (cache fill, token
        # counting); it must only schedule work, never block the stream.
        self._on_complete = on_complete
        # Called instead when the response ended before it was whole (the client left, the
        # backend failed mid-way, the time ran out) with what was delivered: the tokens generated
        # are charged (rate limit, spend) however the response ends, or hanging up just before the
        # end would make every answer free.
        self._on_abandon = on_abandon
        self._agg: ResponseAggregator | None = None
        self._extra_headers = extra_headers or []
        # Headers that need the whole response's usage (cost): sent only on non-streamed responses.
        self._usage_headers = usage_headers
        self._backend = backend
        self._req = req
        self._stream = stream
        self._t0 = t0
        self._metrics = metrics
        self._timeout_s = timeout_s
        self._started = False
        self._status = 200

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        disconnected = False

        def on_disconnect(fut: asyncio.Future[None]) -> None:
            nonlocal disconnected
            if not fut.cancelled() and fut.exception() is None and task is not None:
                disconnected = True
                task.cancel()

        watch = asyncio.ensure_future(_wait_for_disconnect(receive))
        watch.add_done_callback(on_disconnect)
        try:
            await self._run(send)
        except asyncio.CancelledError:
            if not disconnected or task is None or task.uncancel() > 0:
                raise
            self._status = CLIENT_CLOSED
        finally:
            watch.remove_done_callback(on_disconnect)
            watch.cancel()

    async def _run(self, send: Send) -> None:
        stamp = observe_stream(self._req, self._backend.name)
        it = self._backend.stream(self._req)
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._stream:
                    await self._send_stream(it, send, stamp)
                else:
                    await self._send_whole(it, send, stamp)
        except TimeoutError:
            await self._fail(send, BackendTimeoutError(f"The request did not finish within {self._timeout_s:g} s."))
        finally:
            if self._on_abandon is not None and self._agg is not None:
                self._on_abandon(self._agg)
            if self._on_close is not None:
                self._on_close()
            if stamp is not None:
                stamp.close()
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _send_stream(self, it: AsyncIterator[Delta], send: Send, stamp: StreamStamp | None) -> None:
        wire = self._wire
        # Runs once this task waits on the backend (the loop's next turn): off the first token's path.
        asyncio.get_running_loop().call_soon(wire.prepare)
        req = self._req
        wanted = self._on_complete is not None or self._on_abandon is not None
        # Before the first delta: a client gone while the prompt is read is charged for it.
        agg = self._agg = ResponseAggregator(req.kind, req.num_choices, False) if wanted else None
        try:
            first: Delta | None = await self._first_delta(it, send)
        except StopAsyncIteration:
            first = None
        except BlinkError as err:
            self._agg = None  # refused before it began: nothing to charge
            await self._fail(send, err)
            return
        except Exception:
            self._agg = None
            log.exception("backend %s failed before the first token", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed before the first token."))
            return
        if self._started:  # keep-alive comments went out already: record the real TTFT now
            self._ttft_ms()
        else:
            await send(self._start_message(b"text/event-stream", None))
            self._started = True
        # Deltas already in memory together (``Delta.more``) go out in one write: one syscall
        # and one pass through the ASGI send chain instead of one per token. The per-delta work
        # is inline (no coroutine per delta): this loop runs once per token of every stream.
        pending: list[bytes] = []
        try:
            head = wire.opening(first)
            if head:
                pending.append(head)
            if first is not None:
                body = _take(wire, first, agg, stamp, pending)
                if body is not None:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                async for delta in it:
                    body = _take(wire, delta, agg, stamp, pending)
                    if body is not None:
                        await send({"type": "http.response.body", "body": body, "more_body": True})
            pending.append(await wire.closing())
        except BlinkError as err:
            await self._fail(send, err, pending)
            return
        except Exception:
            log.exception("backend %s failed mid-stream", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed mid-stream."), pending)
            return
        await send({"type": "http.response.body", "body": b"".join(pending), "more_body": False})
        self._agg = None  # delivered whole: complete, not abandoned
        if agg is not None and self._on_complete is not None:
            self._on_complete(agg)

    async def _first_delta(self, it: AsyncIterator[Delta], send: Send) -> Delta:
        """``anext(it)``; past ``keepalive_s`` a side task sends the headers and an SSE comment
        every ``keepalive_s`` until the first delta comes. The backend iterator stays in this task
        (context variables, cancel scopes); the fast path costs one timer handle."""
        if self._keepalive_s is None:
            return await anext(it)
        keeper: asyncio.Task[None] | None = None

        def start_keeper() -> None:
            nonlocal keeper
            keeper = asyncio.ensure_future(self._keep_alive(send))

        handle = asyncio.get_running_loop().call_later(self._keepalive_s, start_keeper)
        try:
            return await anext(it)
        finally:
            handle.cancel()
            if keeper is not None:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)

    async def _keep_alive(self, send: Send) -> None:
        while True:
            if not self._started:
                self._started = True  # before the await: a cancel mid-send must not resend headers
                await send(self._start_message(b"text/event-stream", 0.0))
            await send({"type": "http.response.body", "body": self._wire.keep_alive, "more_body": True})
            await asyncio.sleep(self._keepalive_s or 0.0)

    async def _send_whole(self, it: AsyncIterator[Delta], send: Send, stamp: StreamStamp | None) -> None:
        req = self._req
        wire = self._wire
        agg = self._agg = ResponseAggregator(req.kind, req.num_choices, req.options.logprobs,
                                             req.options.return_token_ids)
        ttft: float | None = None
        try:
            async for delta in it:
                if ttft is None:
                    ttft = self._ttft_ms()
                if stamp is not None:
                    stamp.on(delta)
                agg.add(delta)
                wire.add(delta)
            body = await wire.whole(agg)
        except BlinkError as err:
            if not agg.began:
                self._agg = None  # refused before it began: nothing to charge
            await self._fail(send, err)
            return
        except Exception:
            if not agg.began:
                self._agg = None
            log.exception("backend %s failed", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed."))
            return
        if self._usage_headers is not None:
            self._extra_headers = self._extra_headers + self._usage_headers(agg.usage)
        await send(self._start_message(b"application/json", ttft, len(body)))
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._agg = None  # delivered whole: complete, not abandoned
        if self._on_complete is not None:
            self._on_complete(agg)

    def _ttft_ms(self) -> float:
        ms = (time.perf_counter() - self._t0) * 1000.0
        return ms

    def _start_message(self, content_type: bytes, ttft_ms: float | None, length: int | None = None) -> Message:
        if ttft_ms is None and self._stream:
            ttft_ms = self._ttft_ms()
        headers = [
            (b"content-type", content_type),
            (b"x-blink-backend", self._backend.name.encode()),
            (b"x-blink-ttft-ms", f"{ttft_ms or 0.0:.2f}".encode()),
            (b"x-request-id", self._req.request_id.encode()),
            *self._extra_headers,
        ]
        if self._req.compressed_tokens:
            headers.append((b"x-blink-compressed-tokens", str(self._req.compressed_tokens).encode()))
        if length is None:
            headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        else:
            headers.append((b"content-length", str(length).encode()))
        return {"type": "http.response.start", "status": 200, "headers": headers}

    async def _fail(self, send: Send, err: BlinkError, pending: list[bytes] | None = None) -> None:
        self._status = err.status
        record_error(err.status, err.type)
        if self._started:
            body = b"".join(pending) + self._wire.failure(err) if pending else self._wire.failure(err)
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        self._started = True
        for message in error_messages(err):
            await send(message)


def _take(
    wire: WireFormat, delta: Delta, agg: ResponseAggregator | None, stamp: StreamStamp | None, pending: list[bytes]
) -> bytes | None:
    """Encode ``delta`` into ``pending``; the bytes to write now, or None while the next delta is
    already here (it goes out with this one)."""
    if stamp is not None:
        stamp.on(delta)
    if agg is not None:
        agg.add(delta)
    chunk = wire.encode(delta)
    if chunk:
        pending.append(chunk)
    if not pending or delta.more:
        return None
    body = pending[0] if len(pending) == 1 else b"".join(pending)
    pending.clear()
    return body


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
