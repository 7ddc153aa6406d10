"""``RouteSettings`` + the configured backends -> a ``RoutedBackend`` (called by serve.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from blink.backends.base import Backend
from blink.config.routing import ClassifierSettings, RouteSettings
from blink.gateway.resilience.admission import AdmissionConfig
from blink.gateway.resilience.breaker import BreakerConfig
from blink.gateway.resilience.hedge import HedgeConfig
from blink.gateway.resilience.retry import RetryPolicy
from blink.gateway.resilience.timeouts import StreamTimeouts
from blink.gateway.router.affinity import AffinityConfig
from blink.gateway.router.budget import LatencyBudgetPolicy
from blink.gateway.router.cascade import CascadeConfig, CascadePolicy
from blink.gateway.router.classifier import CentroidClassifier, ClassifierPolicy, Embedder
from blink.gateway.router.default_examples import DEFAULT_EXAMPLES
from blink.gateway.router.explicit import ExplicitPolicy
from blink.gateway.router.policy import RoutingPolicy
from blink.gateway.router.routed import RoutedBackend, RoutedConfig
from blink.gateway.router.rules import Rule, RulesPolicy
from blink.gateway.router.tier import Tier


def default_embedder(settings: ClassifierSettings) -> Embedder:
    from blink.gateway.router.minilm import MeanPoolEmbedder, default_model_path

    return MeanPoolEmbedder(settings.embedder_path or default_model_path())


def build_routed_backend(
    route: RouteSettings,
    backends: Mapping[str, Backend],
    *,
    embedder: Callable[[ClassifierSettings], Embedder] = default_embedder,
    owns_backends: bool = True,
) -> RoutedBackend:
    b = route.breaker
    breaker = BreakerConfig(
        error_rate=b.error_rate, ttft_p99_ms=b.ttft_p99_ms, itl_p99_ms=b.itl_p99_ms, min_requests=b.min_requests,
        window_s=b.window_s, open_s=b.open_s, half_open_probes=b.half_open_probes,
    )  # fmt: skip
    a = route.affinity
    affinity = AffinityConfig(enabled=a.enabled, min_match=a.min_match, balance_abs=a.balance_abs, balance_rel=a.balance_rel)
    tiers = [
        Tier(
            t.name,
            [backends[r] for r in t.replicas],
            cost=t.cost if t.cost is not None else i,
            breaker=breaker,
            admission=AdmissionConfig(max_concurrency=t.max_concurrency, max_queue=t.max_queue),
            affinity=affinity,
        )
        for i, t in enumerate(route.tiers)
    ]
    policies: list[RoutingPolicy] = []
    for name in route.policies:
        if name == "explicit":
            policies.append(ExplicitPolicy())
        elif name == "rules":
            policies.append(RulesPolicy([Rule(**r.model_dump()) for r in route.rules]))
        elif name == "latency_budget":
            priors = {t.name: t.ttft_prior_ms for t in route.tiers}
            policies.append(LatencyBudgetPolicy(route.latency_budget_ms, priors))
        elif name == "cascade":
            policies.append(CascadePolicy())
        elif name == "classifier" and route.classifier is not None:
            c = route.classifier
            examples = {label: c.examples.get(label) or DEFAULT_EXAMPLES.get(label, []) for label in c.labels}
            classifier = CentroidClassifier(embedder(c), examples)
            policies.append(ClassifierPolicy(classifier, c.labels, c.min_margin))
    h = route.hedge
    config = RoutedConfig(
        retry=RetryPolicy(max_attempts=route.max_attempts),
        timeouts=StreamTimeouts(first_token_s=route.first_token_timeout_s, stall_s=route.stall_timeout_s),
        hedge=HedgeConfig(enabled=h.enabled, quantile=h.quantile, min_delay_ms=h.min_delay_ms, min_samples=h.min_samples),
        cascade=CascadeConfig(probe_tokens=route.cascade.probe_tokens, min_mean_logprob=route.cascade.min_mean_logprob),
        continue_on_fallback=route.continue_on_fallback,
        default_budget_ms=route.latency_budget_ms,
    )
    return RoutedBackend(
        route.name, tiers, policies, default_tier=route.default_tier, config=config, owns_backends=owns_backends
    )
