"""Rate limits when their Redis is down: admitted (fail_open) or refused with a typed 503, the
error counted, and the next decision quick (the storage sits out its backoff)."""

from __future__ import annotations

import time

import pytest
from servers import RedisServer

from blink.config.gateway import RateLimitSettings
from blink.gateway.ratelimit.limiter import RateLimiter
from blink.gateway.storage.errors import StoreErrorRelay
from blink.protocol.errors import OverloadedError, RateLimitError


async def _limiter_after_redis_stops(fail_open: bool) -> tuple[RateLimiter, StoreErrorRelay]:
    relay = StoreErrorRelay()
    with RedisServer() as server:
        settings = RateLimitSettings(storage_uri=server.url, requests_per_minute=2, fail_open=fail_open, timeout_s=2.0)
        limiter = RateLimiter(settings, relay)
        await limiter.admit("k", 0, 0, "m")
        await limiter.admit("k", 0, 0, "m")
        with pytest.raises(RateLimitError):  # Redis up: the limit holds
            await limiter.admit("k", 0, 0, "m")
    limiter.settings = settings.model_copy(update={"timeout_s": 0.05})
    return limiter, relay


async def test_fail_open_admits_while_redis_is_down() -> None:
    limiter, relay = await _limiter_after_redis_stops(fail_open=True)
    t0 = time.monotonic()
    for _ in range(5):
        ticket = await limiter.admit("k", 0, 0, "m")
        assert ticket.token_limits == []
    assert time.monotonic() - t0 < 1.0
    assert relay.counts[("ratelimit", "admit")] == 1  # then decided without Redis for its backoff
    await limiter.aclose()


async def test_fail_closed_refuses_with_503_while_redis_is_down() -> None:
    limiter, relay = await _limiter_after_redis_stops(fail_open=False)
    for _ in range(3):
        with pytest.raises(OverloadedError) as info:
            await limiter.admit("k", 0, 0, "m")
        err = info.value
        assert err.status == 503 and err.code == "ratelimit_store_unavailable" and err.headers["retry-after"] == "1"
    assert relay.counts[("ratelimit", "admit")] == 1
    await limiter.aclose()
