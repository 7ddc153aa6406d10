"""Served model names -> backends: what the request's ``model`` field selects."""

from __future__ import annotations

import asyncio

from blink.backends.base import Backend, Health, ModelCard, Supervised
from blink.protocol.errors import InvalidRequestError, ModelNotFoundError


class BackendRegistry:
    """Named models, each served by one backend (a backend may serve several names)."""

    def __init__(self, default_model: str | None = None) -> None:
        self._by_model: dict[str, Backend] = {}
        self._default = default_model

    def add(self, model: str, backend: Backend) -> None:
        if model in self._by_model:
            raise ValueError(f"model {model!r} is registered twice")
        self._by_model[model] = backend

    def resolve(self, model: str | None) -> Backend:
        """The backend for ``model``; raises 404 ``model_not_found`` for an unknown name."""
        if model is None:
            model = self.default_model()
        backend = self._by_model.get(model)
        if backend is None:
            raise ModelNotFoundError(f"The model '{model}' does not exist", param="model")
        return backend

    def default_model(self) -> str:
        if self._default is not None:
            return self._default
        if len(self._by_model) == 1:
            return next(iter(self._by_model))
        raise InvalidRequestError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")

    def model_names(self) -> list[str]:
        return list(self._by_model)

    def model_cards(self) -> list[ModelCard]:
        cards = []
        for name, backend in self._by_model.items():
            match = next((c for c in backend.models() if c.id == name), None)
            cards.append(match or ModelCard(id=name))
        return cards

    def backends(self) -> list[Backend]:
        unique: dict[int, Backend] = {}
        for backend in self._by_model.values():
            unique.setdefault(id(backend), backend)
        return list(unique.values())

    async def start_all(self) -> None:
        await asyncio.gather(*(b.start() for b in self.backends()))

    async def aclose_all(self) -> None:
        await asyncio.gather(*(b.aclose() for b in self.backends()), return_exceptions=True)

    def not_live(self) -> list[str]:
        """Backends whose supervisor gave up restarting what they run: ``/health`` fails on any."""
        return [b.name for b in self.backends() if isinstance(b, Supervised) and not b.live()]

    async def health_all(self) -> dict[str, Health]:
        backends = self.backends()
        results = await asyncio.gather(*(_safe_health(b) for b in backends))
        return {b.name: h for b, h in zip(backends, results, strict=True)}


async def _safe_health(backend: Backend) -> Health:
    try:
        return await backend.health()
    except Exception as exc:  # a health probe must never take /ready down with it
        return Health(ok=False, detail=f"{type(exc).__name__}: {exc}")
