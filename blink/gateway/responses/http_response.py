"""The Responses API's ``WireFormat``: how ``POST /v1/responses`` renders a generation.

``GenerationResponse`` runs the generation as for every API: headers wait for the first delta
(so an early failure is a JSON error with its status), keep-alive comments while it is pending, the
request timeout, disconnect -> abort, the lease given back, the cache fill and the stream metrics.
Only what goes on the wire differs: Responses events instead of chat chunks, the response object
instead of a ``chat.completion``, and ``error`` + ``response.failed`` when a started stream fails.
Before the last event the response is stored (``save``), so a client that continues the
conversation the moment it has the answer finds it (the store writes behind, serving reads of what
it has not written yet from memory: ``write_behind.py``).

The opening events (``response.created``, ``response.in_progress``: two snapshots of the response)
are rendered while the backend is being asked (``prepare``), not after its first token, and so are
the opening events of a message item: a first token that is text then costs the gateway about what
a chat chunk costs, and all of them go out in the first token's write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from blink.backends.base import Delta
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.rendering.streaming import KEEP_ALIVE
from blink.gateway.responses.render import ResponseRenderer, sse
from blink.protocol.errors import BlinkError

# Stores the finished response object; False when the store declined it (over budget).
SaveFn = Callable[[dict[str, Any]], Awaitable[bool]]


class ResponsesWire:
    keep_alive = KEEP_ALIVE

    def __init__(self, renderer: ResponseRenderer, save: SaveFn | None) -> None:
        self._renderer = renderer
        self._save = save
        self._opening: list[bytes] | None = None
        self._opened = False  # the opening events went out

    def prepare(self) -> None:
        if self._opening is None:
            self._opening = self._renderer.start()
            self._renderer.prepare_message()

    def opening(self, first: Delta | None) -> bytes:
        self.prepare()
        self._opened = True
        return sse(self._opening or [])

    def encode(self, delta: Delta) -> bytes:
        return sse(self._renderer.feed(delta))

    async def closing(self) -> bytes:
        return sse(await self._settle())

    def failure(self, err: BlinkError) -> bytes:
        opening = b"" if self._opened else self.opening(None)  # headers went out with keep-alives only
        return opening + sse(self._renderer.fail(err))

    def add(self, delta: Delta) -> None:
        self._renderer.feed(delta)

    async def whole(self, agg: ResponseAggregator) -> bytes:
        await self._settle()
        return orjson.dumps(self._renderer.response())

    async def _settle(self) -> list[bytes]:
        events = self._renderer.finish()
        if self._save is not None:
            self._renderer.stored = await self._save(self._renderer.response())
        return events + [self._renderer.terminal()]
