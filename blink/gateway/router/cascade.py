"""Cascade: start on the cheap tier, escalate when its first tokens look unsure.

The gateway holds the first ``probe_tokens`` deltas back and scores them by mean token
logprob; below ``min_mean_logprob`` the small model's attempt is dropped and the request goes
to the next tier — before any token reaches the client, so the client only sees the extra TTFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from blink.backends.base import Delta, GenerationRequest
from blink.config.routing import DEFAULT_MIN_MEAN_LOGPROB, DEFAULT_PROBE_TOKENS
from blink.gateway.router.policy import Route, TierView


@dataclass(slots=True)
class CascadeConfig:
    probe_tokens: int = DEFAULT_PROBE_TOKENS
    min_mean_logprob: float = DEFAULT_MIN_MEAN_LOGPROB


class ConfidenceProbe:
    """Accumulates the held-back deltas and decides: keep (True), escalate (False), undecided (None)."""

    def __init__(self, config: CascadeConfig) -> None:
        self.config = config
        self.held: list[Delta] = []
        self._sum = 0.0
        self._count = 0

    def add(self, delta: Delta) -> bool | None:
        self.held.append(delta)
        for lp in delta.logprobs or ():
            if lp.logprob is None:  # an echoed prompt's first token
                continue
            self._sum += lp.logprob
            self._count += 1
        if self._count >= self.config.probe_tokens or delta.finish_reason is not None:
            return self.verdict()
        return None

    def verdict(self) -> bool:
        if self._count == 0:
            return True  # no logprobs to judge by: keep what we have
        return self.mean_logprob >= self.config.min_mean_logprob

    @property
    def mean_logprob(self) -> float:
        return self._sum / self._count if self._count else 0.0


class CascadePolicy:
    """Route to the cheapest live tier and name the next ones to escalate to."""

    name = "cascade"

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None:
        live = sorted((t for t in tiers if t.available > 0), key=lambda t: t.cost)
        if len(live) < 2:
            return None
        return Route(live[0].name, self.name, escalate_to=[t.name for t in live[1:]])
