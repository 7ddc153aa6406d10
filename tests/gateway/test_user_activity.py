"""UserActivity: background work waits while a user request is in flight and for ``hold_s`` after
the latest arrival or end, and a lease released twice counts once."""

from __future__ import annotations

import asyncio

from blink.gateway.user_activity import NO_USER, UserActivity


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_quiet_waits_for_in_flight_requests_to_end() -> None:
    clock = Clock()
    activity = UserActivity(clock)
    lease = activity.begin()
    waiter = asyncio.create_task(activity.quiet(0.0))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    clock.now += 10  # however long ago it arrived: still in flight
    await asyncio.sleep(0.02)
    assert not waiter.done()
    lease.release()
    await asyncio.wait_for(waiter, 1)
    assert not activity.is_quiet(0.5)  # the window runs from the end too
    clock.now += 0.5
    assert activity.is_quiet(0.5)


async def test_quiet_holds_for_the_window_after_the_latest_activity() -> None:
    activity = UserActivity()
    activity.begin().release()
    assert not activity.is_quiet(0.2)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await activity.quiet(0.2)
    assert loop.time() - t0 >= 0.15
    assert activity.is_quiet(0.2)


async def test_a_lease_released_twice_counts_once_and_no_user_is_inert() -> None:
    activity = UserActivity()
    a, b = activity.begin(), activity.begin()
    a.release()
    a.release()
    assert activity.in_flight == 1
    NO_USER.release()
    assert activity.in_flight == 1
    b.release()
    assert activity.in_flight == 0
    await asyncio.wait_for(activity.quiet(0.0), 1)
