"""A model server with stream middleware of its own: what it serves is always passed through it.

Per-request middleware is applied by the caller and never needs this. Some middleware belongs to
the server instead (prompt compression configured on a model: every caller, a routed tier
included, must get the compressed request), so the server and its middleware are registered as
one ``ModelServer``. Its lifecycle is the inner server's, which it owns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Generic, TypeVar

from blink.backends.base import (
    Delta,
    GenerationRequest,
    Health,
    Load,
    ModelCard,
    ModelServer,
    StreamMiddleware,
)

M = TypeVar("M", bound=StreamMiddleware)


class LayeredServer(Generic[M]):
    """``server`` whose ``stream`` is ``middleware(server.stream)``."""

    def __init__(self, server: ModelServer, middleware: M) -> None:
        self.server = server
        self.name = server.name
        # Kept for whoever reads the middleware's own state (compression's counters).
        self.middleware = middleware
        self._stream = middleware(server.stream)

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        return self._stream(req)

    def models(self) -> list[ModelCard]:
        return self.server.models()

    async def health(self) -> Health:
        return await self.server.health()

    def load(self) -> Load:
        return self.server.load()

    async def start(self) -> None:
        await self.server.start()

    async def aclose(self) -> None:
        await self.server.aclose()
