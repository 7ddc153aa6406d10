"""The shared token budget: one hour's worth at most, refilled over time, debts carried."""

from __future__ import annotations

from blink.gateway.precompute.budget import TokenBudget
from blink.gateway.precompute.storage import LiveEntries


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_reserve_refuses_past_the_hourly_bound_and_refills() -> None:
    clock = _Clock()
    budget = TokenBudget(3600, clock)
    assert budget.reserve(3000)
    assert not budget.reserve(700)  # 600 left: refused, nothing taken
    assert budget.level == 600
    clock.now += 100  # one token a second
    assert budget.reserve(700)


def test_an_idle_hour_banks_no_more_than_one_hour() -> None:
    clock = _Clock()
    budget = TokenBudget(3600, clock)
    clock.now += 10 * 3600
    assert budget.level == 3600
    assert not budget.reserve(3601)


def test_settle_returns_the_unspent_and_carries_an_overspend() -> None:
    clock = _Clock()
    budget = TokenBudget(1000, clock)
    assert budget.reserve(400)
    budget.settle(400, 100)
    assert budget.level == 900
    assert budget.reserve(900)
    budget.settle(900, 1100)  # spent 200 more than reserved: the bucket owes them
    assert budget.level == -200
    assert not budget.reserve(1)


def test_live_entries_bound_frees_slots_as_entries_expire() -> None:
    live = LiveEntries(2)
    assert live.admit(0.0, 10.0) and live.admit(0.0, 20.0)
    assert not live.admit(5.0, 30.0)
    assert live.live(5.0) == 2
    assert live.admit(10.0, 40.0)  # the first expired at 10
    assert live.live(25.0) == 1
