"""Waiting for the response cache's background fills."""

from __future__ import annotations

import asyncio
import time

from blink.gateway.http.dispatch import GatewayApp


def cache_entries(app: GatewayApp) -> int:
    """How many entries the gateway's response cache holds now."""
    return int(asyncio.run(app.state.front.cache.store.stats()).entries)


def wait_entries(app: GatewayApp, n: int, timeout: float = 5.0) -> None:
    """Fills run in the background: wait until the store holds ``n`` entries."""
    deadline = time.monotonic() + timeout
    while cache_entries(app) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"cache did not reach {n} entries")
        time.sleep(0.01)
