"""The hot-entry ledger: what refresh picks, in which order, and its bounds."""

from __future__ import annotations

from blink.gateway.precompute.ledger import HotEntries
from blink.gateway.precompute.recipe import CHAT, Recipe


def _recipe(q: str) -> Recipe:
    return Recipe("key", CHAT, {"messages": [{"role": "user", "content": q}]}, 10)


def test_due_entries_are_the_hot_ones_near_expiry_most_hit_first() -> None:
    hot = HotEntries(10)
    hot.filled("ns", "a", _recipe("a"), expires_at=1000)
    hot.filled("ns", "b", _recipe("b"), expires_at=1000)
    hot.filled("ns", "c", _recipe("c"), expires_at=5000)  # far from expiry
    hot.filled("ns", "d", _recipe("d"), expires_at=1000)  # never hit again
    for _ in range(2):
        hot.hit("ns", "a")
    for _ in range(5):
        hot.hit("ns", "b")
        hot.hit("ns", "c")
    hot.hit("other-ns", "a")  # another namespace's entry: not this one
    due = hot.take_due(now=900, lead_s=200, min_hits=2, limit=10)
    assert [q for _, q, _ in due] == ["b", "a"]
    assert hot.take_due(now=900, lead_s=200, min_hits=2, limit=10) == []  # counts restart
    hot.hit("ns", "a")
    hot.hit("ns", "a")
    hot.refreshed("ns", "a", expires_at=2000)
    assert hot.take_due(now=950, lead_s=200, min_hits=2, limit=10) == []  # pushed past the lead


def test_expired_entries_are_forgotten_and_the_ledger_is_bounded() -> None:
    hot = HotEntries(2)
    hot.filled("ns", "a", _recipe("a"), expires_at=100)
    hot.filled("ns", "b", _recipe("b"), expires_at=1000)
    hot.hit("ns", "a")  # a is now the most recent
    hot.filled("ns", "c", _recipe("c"), expires_at=1000)  # over the bound: b (least recent) goes
    assert len(hot) == 2
    hot.hit("ns", "b")
    hot.hit("ns", "b")
    assert hot.take_due(now=500, lead_s=1000, min_hits=1, limit=10) == []  # a expired, b dropped, c unhit
    assert len(hot) == 1


def test_limit_caps_one_scan() -> None:
    hot = HotEntries(10)
    for q in "abc":
        hot.filled("ns", q, _recipe(q), expires_at=100)
        hot.hit("ns", q)
    assert len(hot.take_due(now=50, lead_s=100, min_hits=1, limit=2)) == 2
    assert len(hot.take_due(now=50, lead_s=100, min_hits=0, limit=5)) == 3
