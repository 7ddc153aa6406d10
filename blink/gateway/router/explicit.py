"""Explicit choice: the client names the tier (``x-blink-tier``); an unknown name is a 400."""

from __future__ import annotations

from collections.abc import Sequence

from blink.backends.base import GenerationRequest
from blink.gateway.router.policy import Route, TierView
from blink.protocol.errors import InvalidRequestError


class ExplicitPolicy:
    name = "explicit"

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None:
        if not req.tier:
            return None
        names = [t.name for t in tiers]
        if req.tier not in names:
            raise InvalidRequestError(
                f"'x-blink-tier' names no tier of model '{req.model}': {req.tier!r} (tiers: {', '.join(names)}).",
                param="x-blink-tier",
                code="invalid_value",
            )
        return Route(req.tier, self.name)
