"""Per-backend circuit breaker on error rate AND on p99 TTFT / inter-token latency.

closed -> open when, over the sliding window (at least ``min_requests`` outcomes), the error
rate or the p99 TTFT / ITL passes its threshold; open -> half-open after ``open_s``; half-open
lets ``half_open_probes`` requests through: a success closes it, a failure opens it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from blink.gateway.resilience.window import SlidingWindow
from blink.obs import count


class BreakerState(Enum):
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(slots=True)
class BreakerConfig:
    # Half of recent requests failing means the backend is sick, not unlucky.
    error_rate: float = 0.5
    # p99 thresholds in ms; None disables that trip (defaults suit interactive chat on a GPU upstream).
    ttft_p99_ms: float | None = 5_000.0
    itl_p99_ms: float | None = 1_000.0
    # Judge only on a few outcomes at least, so one error on a quiet backend does not trip it.
    min_requests: int = 5
    # The window Envoy's outlier detection uses by default (10 s), samples capped for O(n) percentiles.
    window_s: float = 10.0
    max_samples: int = 256
    # How long an open breaker sheds traffic before probing (Hystrix's default sleep window is 5 s).
    open_s: float = 5.0
    half_open_probes: int = 1


class CircuitBreaker:
    """One backend's breaker; ``allow()`` before an attempt, ``record_*`` after it."""

    def __init__(self, name: str, config: BreakerConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.config = c = config or BreakerConfig()
        self._clock = clock
        self._outcomes = SlidingWindow(c.window_s, c.max_samples, clock)  # 1.0 = failure
        self._ttft = SlidingWindow(c.window_s, c.max_samples, clock, threshold=c.ttft_p99_ms)
        self._itl = SlidingWindow(c.window_s, c.max_samples, clock, threshold=c.itl_p99_ms)
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._probes = 0
        self.trips = 0
        self.last_reason = ""

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.config.open_s:
            self._state = BreakerState.HALF_OPEN
            self._probes = 0
            count("breaker_transition", backend=self.name, state="half_open")
        return self._state

    def allow(self) -> bool:
        """Whether an attempt may go to this backend now (takes a probe slot when half-open)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and self._probes < self.config.half_open_probes:
            self._probes += 1
            return True
        return False

    def available(self) -> bool:
        """Like ``allow()`` without taking a probe slot: for ranking candidates."""
        state = self.state
        return state is BreakerState.CLOSED or (
            state is BreakerState.HALF_OPEN and self._probes < self.config.half_open_probes
        )

    def record_success(self, ttft_ms: float | None = None, itl_ms: float | None = None) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._close()
        self._outcomes.add(0.0)
        if ttft_ms is not None:
            self._ttft.add(ttft_ms)
        if itl_ms is not None:
            self._itl.add(itl_ms)
        self._judge()

    def record_failure(self, reason: str = "error") -> None:
        if self.state is BreakerState.HALF_OPEN:
            self._open(f"probe failed: {reason}")
            return
        self._outcomes.add(1.0)
        self._judge(reason)

    def release_probe(self) -> None:
        """An attempt that took a probe slot ended with no verdict (cancelled): free the slot."""
        if self._state is BreakerState.HALF_OPEN and self._probes > 0:
            self._probes -= 1

    def _judge(self, reason: str = "") -> None:
        if self._state is not BreakerState.CLOSED:
            return
        c = self.config
        n = len(self._outcomes)
        if n < c.min_requests:
            return
        rate = self._outcomes.total / n
        if rate >= c.error_rate:
            self._open(f"error rate {rate:.0%} ({reason})")
            return
        if c.ttft_p99_ms is not None and len(self._ttft) >= c.min_requests and self._ttft.quantile_over_threshold(0.99):
            self._open(f"p99 TTFT > {c.ttft_p99_ms:.0f} ms")
            return
        if c.itl_p99_ms is not None and len(self._itl) >= c.min_requests and self._itl.quantile_over_threshold(0.99):
            self._open(f"p99 ITL > {c.itl_p99_ms:.0f} ms")

    def _open(self, reason: str) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._probes = 0
        self.trips += 1
        self.last_reason = reason
        count("breaker_transition", backend=self.name, state="open")

    def _close(self) -> None:
        if self._state is not BreakerState.CLOSED:
            count("breaker_transition", backend=self.name, state="closed")
        self._state = BreakerState.CLOSED
        self._probes = 0
        self._outcomes.clear()
        self._ttft.clear()
        self._itl.clear()
