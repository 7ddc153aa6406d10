"""A tier: interchangeable replicas of one model size, with their breakers and balancing state."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from blink.backends.base import Backend, Load
from blink.gateway.resilience.admission import AdmissionConfig, AdmissionController
from blink.gateway.resilience.breaker import BreakerConfig, CircuitBreaker
from blink.gateway.resilience.window import SlidingWindow
from blink.gateway.router.affinity import AffinityConfig, PrefixIndex
from blink.gateway.router.balancer import P2CBalancer, PeakEwma
from blink.gateway.router.policy import TierView

# TTFT samples kept per replica for its hedging quantile: the last minute, at most 512.
_TTFT_WINDOW_S = 60.0
_TTFT_SAMPLES = 512


class Replica:
    """One backend inside a tier, plus what the gateway itself observed of it."""

    def __init__(self, backend: Backend, breaker: CircuitBreaker) -> None:
        self.backend = backend
        self.name = backend.name
        self.breaker = breaker
        self.in_flight = 0
        # Set by active health checks (ReplicaWatcher); an unhealthy replica leaves rotation.
        self.healthy = True
        self.latency = PeakEwma()
        self.ttft = SlidingWindow(_TTFT_WINDOW_S, _TTFT_SAMPLES)


class Tier:
    def __init__(
        self,
        name: str,
        backends: Sequence[Backend],
        *,
        cost: int = 0,
        breaker: BreakerConfig | None = None,
        admission: AdmissionConfig | None = None,
        affinity: AffinityConfig | None = None,
        balancer: P2CBalancer | None = None,
        discovered: bool = False,
    ) -> None:
        """``discovered``: replicas come and go (DNS discovery), so the tier may start empty."""
        if not backends and not discovered:
            raise ValueError(f"tier {name!r} has no replicas")
        self.name = name
        self.cost = cost
        self._breaker_config = breaker
        self.replicas = [Replica(b, CircuitBreaker(f"{name}/{b.name}", breaker)) for b in backends]
        self.admission = AdmissionController(name, admission)
        self.prefixes = PrefixIndex(affinity)
        self._balancer = balancer or P2CBalancer()

    def load(self) -> Load:
        """Replicas' queues summed (the gateway's own in-flight count where it is higher), plus
        the requests waiting for an admission slot here."""
        total = Load()
        for r in self.replicas:
            load = r.backend.load()
            total.running += max(load.running, r.in_flight)
            total.waiting += load.waiting
        total.waiting += self.admission.queued
        return total

    def ttft_ms(self) -> float | None:
        """The mean of the replicas' TTFT as the router measured it (None before any sample).

        Measured here rather than reported by each server so an embedded engine and an HTTP
        upstream are judged by one estimator with one decay, from where the client waits."""
        values = [r.latency.value for r in self.replicas if r.latency.value is not None]
        return sum(values) / len(values) if values else None

    def set_backends(self, backends: Sequence[Backend]) -> list[Backend]:
        """Make ``backends`` the replicas (kept ones keep their state); returns the removed ones."""
        by_name = {r.name: r for r in self.replicas}
        wanted = {b.name for b in backends}
        self.replicas = [by_name.get(b.name) or Replica(b, CircuitBreaker(f"{self.name}/{b.name}", self._breaker_config))
                         for b in backends]
        return [r.backend for name, r in by_name.items() if name not in wanted]

    def view(self) -> TierView:
        available = sum(1 for r in self.replicas if r.healthy and r.breaker.available())
        return TierView(
            self.name, self.cost, self.load(), len(self.replicas), available, self.admission.config.max_concurrency,
            self.ttft_ms(),
        )

    def pick(self, hashes: Sequence[bytes], exclude: Collection[Replica] = ()) -> Replica | None:
        """A replica whose breaker lets traffic through: prefix affinity first, else P2C."""
        eligible = [r for r in self.replicas if r not in exclude and r.healthy and r.breaker.available()]
        if not eligible:
            return None
        chosen: Replica | None = None
        if hashes and self.prefixes.config.enabled and len(eligible) > 1:
            name, ratio = self.prefixes.best(hashes, [r.name for r in eligible])
            if name is not None and ratio >= self.prefixes.config.min_match:
                if not self.prefixes.imbalanced([r.in_flight for r in eligible]):
                    chosen = next(r for r in eligible if r.name == name)
        if chosen is None:
            chosen = eligible[self._balancer.pick(eligible)]
        if not chosen.breaker.allow():  # a half-open probe slot was taken meanwhile
            return None
        if hashes:
            self.prefixes.insert(hashes, chosen.name)
        return chosen
