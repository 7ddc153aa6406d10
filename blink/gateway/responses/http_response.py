"""The ASGI response of ``POST /v1/responses``: ``GenerationResponse`` with the Responses rendering.

Everything about running a generation is inherited unchanged: headers wait for the first delta
(so an early failure is a JSON error with its status), keep-alive comments while it is pending, the
request timeout, disconnect -> abort, the lease given back, the cache fill and the stream metrics.
Only what goes on the wire differs: Responses events instead of chat chunks, the response object
instead of a ``chat.completion``, and ``error`` + ``response.failed`` when a started stream fails.
Before the last event the response is stored (``save``), so a client that continues the
conversation the moment it has the answer finds it (the store writes behind, serving reads of what
it has not written yet from memory: ``write_behind.py``).

The opening events (``response.created``, ``response.in_progress``: two snapshots of the response)
are rendered while the backend is being asked, not after its first token, and so are the opening
events of a message item: a first token that is text then costs the gateway about what a chat
chunk costs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.types import Send

from blink.backends.base import Delta
from blink.gateway.aggregate import ResponseAggregator
from blink.gateway.generation_response import GenerationResponse
from blink.gateway.responses.render import ResponseRenderer, sse
from blink.obs.deltas import StreamStamp
from blink.obs.stages import record_error
from blink.protocol.errors import BlinkError, InternalServerError

log = logging.getLogger("blink.gateway")

# Stores the finished response object; False when the store declined it (over budget).
SaveFn = Callable[[dict[str, Any]], Awaitable[bool]]


class ResponsesResponse(GenerationResponse):
    def __init__(self, *args: Any, renderer: ResponseRenderer, save: SaveFn | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._renderer = renderer
        self._save = save
        self._opening: list[bytes] | None = None
        self._opening_sent = False

    def _open(self) -> list[bytes]:
        if self._opening is None:
            self._opening = self._renderer.start()
            self._renderer.prepare_message()
        return self._opening

    async def _settle(self) -> list[bytes]:
        events = self._renderer.finish()
        if self._save is not None:
            self._renderer.stored = await self._save(self._renderer.response())
        return events + [self._renderer.terminal()]

    async def _send_stream(self, it: AsyncIterator[Delta], send: Send, stamp: StreamStamp | None) -> None:
        # Runs once this task waits on the backend (the loop's next turn): off the first token's path.
        asyncio.get_running_loop().call_soon(self._open)
        try:
            first: Delta | None = await self._first_delta(it, send)
        except StopAsyncIteration:
            first = None
        except BlinkError as err:
            await self._fail(send, err)
            return
        except Exception:
            log.exception("backend %s failed before the first token", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed before the first token."))
            return
        if self._started:
            self._ttft_ms()
        else:
            await send(self._start_message(b"text/event-stream", None))
            self._started = True
        req = self._req
        agg = ResponseAggregator(req.kind, req.num_choices, False) if self._on_complete is not None else None
        events = list(self._open())
        self._opening_sent = True
        try:
            if first is not None:
                events += self._take(first, agg, stamp)
                await send({"type": "http.response.body", "body": sse(events), "more_body": True})
                events = []
                async for delta in it:
                    events += self._take(delta, agg, stamp)
                    if events and not delta.more:
                        await send({"type": "http.response.body", "body": sse(events), "more_body": True})
                        events = []
            events += await self._settle()
        except BlinkError as err:
            await self._fail(send, err, [sse(events)])
            return
        except Exception:
            log.exception("backend %s failed mid-stream", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed mid-stream."), [sse(events)])
            return
        await send({"type": "http.response.body", "body": sse(events), "more_body": False})
        if agg is not None and self._on_complete is not None:
            self._on_complete(agg)

    def _take(self, delta: Delta, agg: ResponseAggregator | None, stamp: StreamStamp | None) -> list[bytes]:
        if stamp is not None:
            stamp.on(delta)
        if agg is not None:
            agg.add(delta)
        return self._renderer.feed(delta)

    async def _send_whole(self, it: AsyncIterator[Delta], send: Send, stamp: StreamStamp | None) -> None:
        req = self._req
        agg = ResponseAggregator(req.kind, req.num_choices, False)
        ttft: float | None = None
        try:
            async for delta in it:
                if ttft is None:
                    ttft = self._ttft_ms()
                self._take(delta, agg, stamp)
            await self._settle()
        except BlinkError as err:
            await self._fail(send, err)
            return
        except Exception:
            log.exception("backend %s failed", self._backend.name)
            await self._fail(send, InternalServerError("The backend failed."))
            return
        body = orjson.dumps(self._renderer.response())
        if self._usage_headers is not None:
            self._extra_headers = self._extra_headers + self._usage_headers(agg.usage)
        await send(self._start_message(b"application/json", ttft, len(body)))
        await send({"type": "http.response.body", "body": body, "more_body": False})
        if self._on_complete is not None:
            self._on_complete(agg)

    async def _fail(self, send: Send, err: BlinkError, pending: list[bytes] | None = None) -> None:
        if not self._started or not self._stream:
            await super()._fail(send, err, pending)
            return
        self._status = err.status
        record_error(err.status, err.type)
        r = self._renderer
        opening = [] if self._opening_sent else self._open()  # headers went out with keep-alives only
        body = b"".join(pending or ()) + sse(opening + r.fail(err))
        await send({"type": "http.response.body", "body": body, "more_body": False})
