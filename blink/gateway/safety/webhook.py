"""Optional report of a flagged exchange: one JSON POST, fire and forget, bounded in time."""

from __future__ import annotations

import logging
from typing import Any

import httpx

log = logging.getLogger("blink.safety")

# A slow receiver must not pile up tasks: give up after this long.
_TIMEOUT_S = 2.0


class Webhook:
    def __init__(self, url: str) -> None:
        self.url = url
        self._client: httpx.AsyncClient | None = None

    async def post(self, payload: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=_TIMEOUT_S)
        try:
            await self._client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            log.warning("safety webhook %s failed: %s", self.url, exc)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
