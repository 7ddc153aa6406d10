"""The part of ``Backend`` a per-request wrapper hands straight to the backend it wraps.

Wrappers (the safety stream guard, the semantic cache's head start) change only ``stream``;
models, health, load and start are the wrapped backend's, and one class says so once.
"""

from __future__ import annotations

from blink.backends.base import Backend, Health, Load, ModelCard


class WrappingBackend:
    """Delegates everything but ``stream`` to ``inner``; subclasses define ``stream``."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name  # backends name themselves once, at construction

    def models(self) -> list[ModelCard]:
        return self.inner.models()

    async def health(self) -> Health:
        return await self.inner.health()

    def load(self) -> Load:
        return self.inner.load()

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        """Nothing of its own to close: the wrapped backend belongs to the registry, which closes it."""
        return None
