"""Opt-in head start: call the backend as soon as the exact cache misses, drop the call on a semantic hit.

The semantic lookup costs one embedding plus a nearest-neighbour search before the backend
would otherwise be called (benchmarks/RESULTS.md, "Cache latency"); on a miss that is pure
added latency. With ``cache.semantic.head_start`` the backend's stream is opened (request sent,
waiting for its first delta) while the lookup runs; a miss then loses no time, and a semantic hit
cancels the call. The price: every semantic hit has started backend work that is thrown away
(an HTTP upstream sees a request that is cut; an engine may have prefilled it), which is why it
is off by default. A routing classifier that reuses the cache's embedding computes its own here,
since routing starts before the embedding exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from blink.backends.base import Delta, GenerationRequest, StreamSource


class HeadStart:
    """One request's already-started stream, handed on as a ``StreamSource`` (same name).

    The first delta is fetched by a task (so it runs while the lookup awaits the embedder); the
    rest is pulled by the response as usual, so backpressure and disconnects work as without it.
    """

    def __init__(self, source: StreamSource, req: GenerationRequest) -> None:
        self.inner = source
        self.name = source.name
        self._req = req
        self._it = source.stream(req)
        self._first: asyncio.Task[Delta] = asyncio.ensure_future(anext(self._it))  # type: ignore[arg-type]
        self._taken = False

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        if req is not self._req or self._taken:
            return self.inner.stream(req)  # not the request it was started for: an ordinary call
        self._taken = True
        return self._replay()

    async def _replay(self) -> AsyncIterator[Delta]:
        try:
            try:
                first = await self._first
            except StopAsyncIteration:
                return
            yield first
            async for delta in self._it:
                yield delta
        finally:
            if not self._first.done():
                self._first.cancel()
            await asyncio.gather(self._first, return_exceptions=True)
            await self._it.aclose()  # type: ignore[attr-defined]

    async def discard(self) -> None:
        """A hit served the request: abort the call (the backend sees a disconnect) and close it."""
        self._first.cancel()
        await asyncio.gather(self._first, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._it.aclose()  # type: ignore[attr-defined]
