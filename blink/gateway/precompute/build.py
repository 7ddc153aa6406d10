"""Settings -> the pre-computation service, wired to the app's pipeline (for serve.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from blink.config.settings import Settings
from blink.gateway.auth.keys import KeyStore
from blink.gateway.pipeline import GenerationPipeline
from blink.gateway.precompute.metrics import PrecomputeCollector
from blink.gateway.precompute.runner import RecipeRunner
from blink.gateway.precompute.service import PrecomputeService


def build_precompute(settings: Settings) -> PrecomputeService | None:
    """The service when ``cache.precompute`` turns a job on; a setting it cannot honour is refused
    at start, never accepted and ignored."""
    cache = settings.cache
    p = cache.precompute
    if not (p.refresh or p.predict):
        return None
    if not (cache.exact.enabled or cache.semantic.enabled):
        raise ValueError("cache.precompute needs a cache: enable cache.exact or cache.semantic")
    if p.predict and not cache.semantic.enabled:
        raise ValueError("cache.precompute.predict needs cache.semantic (flows are learned from its embeddings)")
    return PrecomputeService(p, cache.ttl_s)


def attach_precompute(service: PrecomputeService, pipeline: GenerationPipeline, key_store: KeyStore | None,
                      settings: Settings, registry: CollectorRegistry) -> None:  # fmt: skip
    """The service observes ``pipeline`` (given at its construction) and runs its jobs through it:
    the one mutual reference in the composition, so the runner is set here, right after."""
    service.attach(RecipeRunner(pipeline, key_store, settings.server.max_tokens_limit,
                                settings.server.request_timeout_s, settings.cache.precompute.quiet_ms / 1000))
    registry.register(PrecomputeCollector(service.stats))
