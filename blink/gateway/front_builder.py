"""Settings -> the front stages (API keys, rate limits, cache), for the composition root."""

from __future__ import annotations

from pathlib import Path

from blink.config.gateway import CacheSettings
from blink.config.settings import Settings
from blink.gateway.auth.keys import ApiKeyStore, KeyStore
from blink.gateway.cache.semantic import GuardedMatcher
from blink.gateway.cache.stage import ResponseCache
from blink.gateway.cache.store import CacheStore
from blink.gateway.cost.tracker import CostTracker
from blink.gateway.front import GatewayFront
from blink.gateway.ratelimit.limiter import RateLimiter
from blink.gateway.safety.metrics import SafetyCollector
from blink.gateway.safety.stage import SafetyStage
from blink.gateway.storage.errors import StoreErrorSink
from blink.modelserver.clients import EncoderClient
from blink.obs.metrics import GatewayMetrics


def build_key_store(settings: Settings) -> KeyStore | None:
    if not settings.auth.enabled:
        return None
    if settings.auth.postgres_dsn:
        from blink.gateway.auth.postgres import PostgresKeyStore

        return PostgresKeyStore(settings.auth.postgres_dsn)
    return ApiKeyStore(settings.auth.keys_db)


def build_cache_store(cache: CacheSettings, dim: int = 384, errors: StoreErrorSink | None = None) -> CacheStore:
    """``dim``: the embedder's output size (all-MiniLM-L6-v2: 384), for stores that fix it.
    Shared stores (Redis, PostgreSQL) are wrapped so that one down or slow is skipped, never waited on."""
    from blink.gateway.cache.stores.fail_soft import FailSoftStore

    if cache.store == "redis":
        from blink.gateway.cache.stores.redis import RedisCacheStore
        from blink.gateway.cache.stores.tiered import TieredCacheStore

        if not cache.redis_url:
            raise ValueError("cache.store 'redis' needs cache.redis_url")
        redis = RedisCacheStore(cache.redis_url, max_entries=cache.max_entries, timeout_s=cache.store_timeout_s)
        exact = FailSoftStore(redis, "redis_cache", errors, timeout_s=cache.store_timeout_s)
        if not cache.postgres_dsn:
            return exact
        from blink.gateway.cache.stores.postgres import PostgresCacheStore

        vectors = PostgresCacheStore(cache.postgres_dsn, max_entries=cache.max_entries, dim=dim)
        return TieredCacheStore(exact, FailSoftStore(vectors, "postgres_cache", errors, timeout_s=cache.store_timeout_s))
    if cache.store == "memory":
        from blink.gateway.cache.stores.memory import MemoryCacheStore

        return MemoryCacheStore(cache.max_entries)
    if cache.store == "postgres":
        from blink.gateway.cache.stores.postgres import PostgresCacheStore

        if not cache.postgres_dsn:
            raise ValueError("cache.store 'postgres' needs cache.postgres_dsn")
        pg = PostgresCacheStore(cache.postgres_dsn, max_entries=cache.max_entries, dim=dim)
        return FailSoftStore(pg, "postgres_cache", errors, timeout_s=cache.store_timeout_s)
    from blink.gateway.cache.stores.sqlite import SQLiteCacheStore

    return SQLiteCacheStore(Path(cache.path).expanduser(), max_entries=cache.max_entries)


def build_matcher(cache: CacheSettings, encoder: EncoderClient | None = None) -> GuardedMatcher:
    from blink.gateway.cache.semantic import GuardedMatcher

    if encoder is not None:  # the model server's batched encoder, shared with routing and /v1/embeddings
        s = cache.semantic
        return GuardedMatcher(encoder, s.threshold, s.guard, embed_async=encoder.aembed)
    return GuardedMatcher.from_settings(cache.semantic)


def build_response_cache(
    cache: CacheSettings, encoder: EncoderClient | None = None, errors: StoreErrorSink | None = None
) -> ResponseCache | None:
    if not (cache.exact.enabled or cache.semantic.enabled):
        return None
    matcher = build_matcher(cache, encoder) if cache.semantic.enabled else None
    dim = matcher.embedder.dim if matcher is not None else 384
    return ResponseCache(build_cache_store(cache, dim, errors), cache, matcher)


def build_front(
    settings: Settings, metrics: GatewayMetrics, encoder: EncoderClient | None = None,
    safety: SafetyStage | None = None, cost: CostTracker | None = None,
) -> GatewayFront:
    """The stages around every generation: cache, rate limits, safety, cost accounting."""
    cache = build_response_cache(settings.cache, encoder, metrics)
    limits = settings.ratelimit
    # Keys carry their own limits, so with API keys on the limiter is always consulted.
    wanted = settings.auth.enabled or limits.requests_per_minute or limits.tokens_per_minute or limits.models
    limiter = RateLimiter(limits, metrics) if wanted else None
    if safety is not None:
        metrics.registry.register(SafetyCollector(safety))
    return GatewayFront(cache, limiter, safety, cost)
