"""LocalMovingWindow: exact moving-window semantics, checked against the ``limits`` library."""

from __future__ import annotations

import random

import pytest
from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from blink.gateway.ratelimit.window import LocalMovingWindow


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_units_leave_the_window_exactly_one_window_later() -> None:
    clock = Clock()
    w = LocalMovingWindow(clock)
    item = RateLimitItemPerMinute(10)
    assert await w.hit(item, "k", cost=6)
    clock.now += 30
    assert await w.hit(item, "k", cost=4)
    assert not await w.test(item, "k")
    stats = await w.get_window_stats(item, "k")
    assert stats.remaining == 0 and stats.reset_time == pytest.approx(clock.now - 30 + 60)
    clock.now += 30  # the first 6 units are now exactly 60 s old: out
    assert (await w.get_window_stats(item, "k")).remaining == 6
    assert not await w.hit(item, "k", cost=7)  # a refused hit records nothing
    assert (await w.get_window_stats(item, "k")).remaining == 6


async def test_identifiers_and_items_have_separate_windows() -> None:
    w = LocalMovingWindow(Clock())
    small, big = RateLimitItemPerMinute(1, namespace="a"), RateLimitItemPerMinute(1, namespace="b")
    assert await w.hit(small, "k1") and await w.hit(small, "k2") and await w.hit(big, "k1")
    assert not await w.hit(small, "k1")


async def test_agrees_with_the_limits_library_on_a_random_burst() -> None:
    """Within one burst (no unit expires) both count the same: same verdicts, same remaining."""
    ours, theirs = LocalMovingWindow(), MovingWindowRateLimiter(MemoryStorage())
    item = RateLimitItemPerMinute(50)
    rng = random.Random(7)
    for _ in range(60):
        cost = rng.randint(1, 6)
        assert await ours.test(item, "k", cost=cost) == await theirs.test(item, "k", cost=cost)
        assert await ours.hit(item, "k", cost=cost) == await theirs.hit(item, "k", cost=cost)
        assert (await ours.get_window_stats(item, "k")).remaining == (
            await theirs.get_window_stats(item, "k")
        ).remaining
