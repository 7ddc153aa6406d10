"""When requests start. Closed loop: a fixed number of users, each sends when the last answer
ended. Open loop: arrivals at a rate regardless of answers (what real traffic does), with
gamma-distributed gaps: burstiness 1 is Poisson, < 1 burstier, > 1 more regular (vLLM's
``benchmark_serving`` convention, so figures compare)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoadShape:
    concurrency: int | None = None  # closed loop when set
    rate: float | None = None  # open loop: mean requests per second
    burstiness: float = 1.0

    def describe(self) -> str:
        if self.rate is None:
            return f"closed loop, concurrency {self.concurrency}"
        kind = "Poisson" if self.burstiness == 1.0 else f"gamma, burstiness {self.burstiness:g}"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        return f"open loop, {self.rate:g} req/s ({kind}){cap}"


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Start times (seconds from the run's start) of ``n`` open-loop arrivals."""
    if rate <= 0 or burstiness <= 0:
        raise ValueError("rate and burstiness must be positive")
    rng = random.Random(seed)
    # Gamma(shape=k, scale=1/(rate*k)) has mean 1/rate and coefficient of variation 1/sqrt(k).
    scale = 1.0 / (rate * burstiness)
    t = 0.0
    out = []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, scale)
    return out
