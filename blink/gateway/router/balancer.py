"""Peak-EWMA latency with power-of-two choices: pick a replica inside a tier.

Cost = peak-EWMA TTFT x (requests in flight + 1) (Finagle / Linkerd's load balancer): a
latency spike counts at once, recovery decays with ``tau_s``. Two random eligible replicas are
compared and the cheaper wins — nearly as good as least-loaded, without herding.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol

# Decay time constant of the EWMA: Linkerd's default (10 s).
_TAU_S = 10.0
# Cost assumed for a replica with no sample yet: optimistic, so new replicas get tried.
_UNKNOWN_MS = 1.0


class PeakEwma:
    __slots__ = ("value", "_stamp", "_tau", "_clock")

    def __init__(self, tau_s: float = _TAU_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.value: float | None = None
        self._stamp = clock()
        self._tau = tau_s
        self._clock = clock

    def observe(self, ms: float) -> None:
        now = self._clock()
        if self.value is None or ms > self.value:
            self.value = ms
        else:
            w = math.exp(-(now - self._stamp) / self._tau)
            self.value = self.value * w + ms * (1.0 - w)
        self._stamp = now


class Balanced(Protocol):
    """What the balancer reads of a replica."""

    in_flight: int
    latency: PeakEwma


def cost(r: Balanced) -> float:
    return (r.latency.value if r.latency.value is not None else _UNKNOWN_MS) * (r.in_flight + 1)


class P2CBalancer:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, replicas: Sequence[Balanced]) -> int:
        """Index of the chosen replica among ``replicas`` (non-empty)."""
        n = len(replicas)
        if n == 1:
            return 0
        a, b = self._rng.sample(range(n), 2)
        return a if cost(replicas[a]) <= cost(replicas[b]) else b
