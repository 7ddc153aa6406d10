"""Latency-budget routing: the cheapest tier whose predicted TTFT fits the request's budget.

Budget: ``x-blink-latency-budget-ms`` or the route's default. Predicted TTFT of a tier = its
recent TTFT (the router's peak EWMA) x (1 + requests queued per available replica): every request ahead in the
queue costs about one more prefill. A tier with no sample yet uses its configured prior.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from blink.backends.base import GenerationRequest
from blink.gateway.router.policy import Route, TierView


def predicted_ttft_ms(tier: TierView, prior_ms: float) -> float:
    load = tier.load
    base = tier.ttft_ms if tier.ttft_ms is not None else prior_ms
    replicas = max(tier.available, 1)
    queued = load.waiting
    if tier.concurrency > 0:
        # Beyond the admission cap, running requests also wait for a slot.
        queued += max(0, load.running - tier.concurrency * tier.replicas)
    return base * (1.0 + queued / replicas)


class LatencyBudgetPolicy:
    name = "latency_budget"

    def __init__(self, default_budget_ms: float | None = None, priors_ms: Mapping[str, float] | None = None) -> None:
        self.default_budget_ms = default_budget_ms
        # Before a tier has served anything, assume this TTFT for it (500 ms: a mid-size GPU model).
        self.priors_ms = dict(priors_ms or {})

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None:
        budget = req.latency_budget_ms if req.latency_budget_ms is not None else self.default_budget_ms
        live = [t for t in tiers if t.available > 0]
        if budget is None or not live:
            return None
        predicted = {t.name: predicted_ttft_ms(t, self.priors_ms.get(t.name, 500.0)) for t in live}
        fitting = [t for t in live if predicted[t.name] <= budget]
        if fitting:
            best = min(fitting, key=lambda t: (t.cost, predicted[t.name]))
            return Route(best.name, self.name, f"predicted {predicted[best.name]:.0f} ms <= {budget:.0f} ms")
        fastest = min(live, key=lambda t: predicted[t.name])
        return Route(fastest.name, self.name, f"nothing fits {budget:.0f} ms; fastest {predicted[fastest.name]:.0f} ms")
