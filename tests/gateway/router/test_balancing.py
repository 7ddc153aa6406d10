"""Replica choice: peak-EWMA P2C and prefix affinity (SGLang's cache-aware rule)."""

from __future__ import annotations

import random

from blink.backends.base import Delta, GenerationRequest, Health, Load, ModelCard
from blink.gateway.router.affinity import AffinityConfig, PrefixIndex, block_hashes
from blink.gateway.router.balancer import P2CBalancer, PeakEwma
from blink.gateway.router.tier import Tier


class Idle:
    """A backend that is never called: balancing only reads names and load."""

    def __init__(self, name: str) -> None:
        self.name = name

    def models(self) -> list[ModelCard]:
        return [ModelCard(self.name)]

    async def stream(self, req: GenerationRequest):  # type: ignore[no-untyped-def]
        yield Delta(text="")

    async def health(self) -> Health:
        return Health(True)

    def load(self) -> Load:
        return Load()

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def test_peak_ewma_jumps_up_at_once_and_decays_down() -> None:
    now = [0.0]
    e = PeakEwma(tau_s=10.0, clock=lambda: now[0])
    e.observe(10.0)
    e.observe(100.0)
    assert e.value == 100.0
    now[0] = 10.0
    e.observe(10.0)
    assert e.value is not None and 10.0 < e.value < 50.0


def test_p2c_prefers_the_cheaper_replica() -> None:
    tier = Tier("t", [Idle("a"), Idle("b"), Idle("c")], balancer=P2CBalancer(random.Random(0)))
    for r, ms in zip(tier.replicas, (5.0, 50.0, 500.0), strict=True):
        r.latency.observe(ms)
    picks = [tier.pick([]).name for _ in range(300)]  # type: ignore[union-attr]
    assert picks.count("a") > picks.count("b") > picks.count("c") == 0  # the worst never wins a pair


def test_load_counts_in_the_cost() -> None:
    tier = Tier("t", [Idle("a"), Idle("b")])
    for r in tier.replicas:
        r.latency.observe(10.0)
    tier.replicas[0].in_flight = 5
    assert all(tier.pick([]).name == "b" for _ in range(20))  # type: ignore[union-attr]


def test_a_tiers_ttft_is_the_routers_own_measurement() -> None:
    """Servers report gauges only; the tier's TTFT (what latency-budget routing and admission read)
    is the mean of what the router measured per replica, and None before any sample."""
    tier = Tier("t", [Idle("a"), Idle("b"), Idle("c")])
    assert tier.ttft_ms() is None and tier.view().ttft_ms is None
    tier.replicas[0].latency.observe(100.0)
    tier.replicas[1].latency.observe(300.0)
    assert tier.ttft_ms() == 200.0  # the replica without a sample does not count as 0
    view = tier.view()
    assert view.ttft_ms == 200.0 and view.load.running == 0 and view.load.waiting == 0


def test_shared_long_prefix_sticks_to_one_replica() -> None:
    tier = Tier("t", [Idle(n) for n in "abcd"], balancer=P2CBalancer(random.Random(1)))
    system = "You are a helpful assistant for ACME Corp. " * 20
    first = tier.pick(block_hashes(system + "question one"))
    assert first is not None
    for q in ("question two", "another question entirely", "three"):
        chosen = tier.pick(block_hashes(system + q))
        assert chosen is first


def test_imbalance_overrides_affinity() -> None:
    tier = Tier("t", [Idle("a"), Idle("b")], affinity=AffinityConfig(balance_abs=4, balance_rel=1.5))
    text = "shared prefix " * 40
    owner = tier.pick(block_hashes(text))
    assert owner is not None
    owner.in_flight = 10  # far busier than the other replica
    other = tier.pick(block_hashes(text))
    assert other is not None and other is not owner


def test_prefix_index_forgets_least_recently_used() -> None:
    index = PrefixIndex(AffinityConfig(max_blocks=4))
    old, new = block_hashes("o" * 64 * 4), block_hashes("n" * 64 * 4)
    index.insert(old, "a")
    index.insert(new, "b")
    assert index.best(old, ["a", "b"]) == (None, 0.0)
    assert index.best(new, ["a", "b"]) == ("b", 1.0)
