"""Waiting for the response cache's background fills."""

from __future__ import annotations

import asyncio
import time

from blink.gateway.http.dispatch import GatewayApp


def wait_entries(app: GatewayApp, n: int, timeout: float = 5.0) -> None:
    """Fills run in the background: wait until the store holds ``n`` entries."""
    store = app.state.front.cache.store
    deadline = time.monotonic() + timeout
    while asyncio.run(store.stats()).entries < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"cache did not reach {n} entries")
        time.sleep(0.01)
