"""The served models (``models:`` in the YAML file): one type per ``kind``, each with only its own fields.

```yaml
models:
  - name: local                      # kind: embedded (the default): Blink's own engine
    model: HuggingFaceTB/SmolLM2-135M-Instruct
    max_num_seqs: 64
  - name: big
    kind: openai_http                # an OpenAI-compatible upstream
    base_url: https://api.example.com/v1
    api_key_env: BIG_API_KEY
  - name: gpu
    kind: vllm                       # a local `vllm serve` that Blink starts and supervises
    model: Qwen/Qwen2.5-0.5B-Instruct
```

A field of another kind (``dtype`` on an ``openai_http`` model, ``base_url`` on an embedded one)
is refused by name rather than ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from blink.byte_size import ByteSize
from blink.config.compression import CompressionSettings
from blink.config.discovery import DiscoverySettings, VllmSettings
from blink.config.supervision import SupervisionSettings
from blink.request_limits import DEFAULT_MAX_SEQS_PER_REQUEST_SHARE

DEFAULT_EMBEDDED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

# How tool calls are read from an embedded model's output: a format, "auto" (the one the chat
# template shows) or "none" (blink/backends/tool_parsers.py).
ToolParserSetting = Literal["auto", "hermes", "llama3_json", "mistral", "none"]


class _ModelBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The id clients put in ``model``; defaults to the model's own id (see each kind).
    name: str = ""

    @model_validator(mode="before")
    @classmethod
    def _own_fields_only(cls, data: Any) -> Any:
        """Name a field that belongs to another kind, rather than pydantic's bare "extra input"."""
        if not isinstance(data, dict):
            return data
        foreign = [k for k in data if k not in cls.model_fields]
        if foreign:
            kind = cls.model_fields["kind"].default
            reasons = []
            for key in foreign:
                owners = [k for k, c in MODEL_KINDS.items() if key in c.model_fields]
                reasons.append(f"{key!r} applies to {' and '.join(owners)} models, not {kind} ones" if owners
                               else f"{key!r} is not a setting of any model kind")
            raise ValueError("; ".join(reasons))
        return data


class EmbeddedModel(_ModelBase):
    """A model run in-process by Blink's engine (blink/engine/)."""

    kind: Literal["embedded"] = "embedded"
    # Hugging Face id, local folder or .gguf file.
    model: str = DEFAULT_EMBEDDED_MODEL
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
    # How tool calls are read from the model's output; "auto" picks the format its chat
    # template shows (<tool_call> -> hermes, [TOOL_CALLS] -> mistral, <|python_tag|> -> llama3_json).
    tool_parser: ToolParserSetting = "auto"
    # Restart the engine core when it dies (blink/config/supervision.py).
    supervision: SupervisionSettings = SupervisionSettings()

    @model_validator(mode="after")
    def _default_name(self) -> EmbeddedModel:
        self.name = self.name or self.model
        return self


class _UpstreamClient(_ModelBase):
    """How Blink talks to an OpenAI-compatible server (an upstream, or the vLLM it launched)."""

    # API key read from this environment variable; the model's id upstream (default: ``name``).
    api_key_env: str | None = None
    upstream_model: str | None = None
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(300.0, gt=0)
    max_connections: int = Field(256, ge=1)
    # APIs besides chat/completions the upstream serves itself ("messages": Anthropic's
    # /v1/messages, as vLLM and LiteLLM do; "responses": OpenAI's /v1/responses, as OpenAI and vLLM
    # do); their requests pass through in that form instead of being translated to chat completions.
    native_apis: list[Literal["messages", "responses"]] = Field(default_factory=list)


class OpenAIHTTPModel(_UpstreamClient):
    """An OpenAI-compatible upstream (a provider, vLLM, SGLang, llama.cpp...) Blink forwards to."""

    kind: Literal["openai_http"] = "openai_http"
    # The upstream's base URL (".../v1"), or dns://host:port/v1 for every address host resolves to.
    base_url: str
    # Drop the least informative words of long context before it is sent, scored by an embedded
    # model (blink/gateway/compression/); None = send every token.
    compression: CompressionSettings | None = None
    # More replicas (static or DNS) and their health checks (blink/config/discovery.py).
    discovery: DiscoverySettings = DiscoverySettings()

    @model_validator(mode="after")
    def _default_name(self) -> OpenAIHTTPModel:
        self.name = self.name or self.upstream_model or "default"
        return self


class VllmModel(_UpstreamClient):
    """A local ``vllm serve`` process that Blink starts, supervises and forwards to."""

    kind: Literal["vllm"] = "vllm"
    # What ``vllm serve`` loads (a Hugging Face id or folder).
    model: str
    vllm: VllmSettings = VllmSettings()

    @model_validator(mode="after")
    def _default_name(self) -> VllmModel:
        self.name = self.name or self.upstream_model or self.model
        return self


MODEL_KINDS: dict[str, type[_ModelBase]] = {"embedded": EmbeddedModel, "openai_http": OpenAIHTTPModel, "vllm": VllmModel}


def _kind(value: Any) -> str | None:
    """The union's tag: ``kind``, which YAML files may leave out for the embedded engine."""
    kind = value.get("kind", "embedded") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in MODEL_KINDS else None


# One served model, validated as the type its ``kind`` names.
ModelSettings = Annotated[
    Annotated[EmbeddedModel, Tag("embedded")] | Annotated[OpenAIHTTPModel, Tag("openai_http")]
    | Annotated[VllmModel, Tag("vllm")],
    Discriminator(_kind, custom_error_type="model_kind",
                  custom_error_message=f"'kind' must be one of {', '.join(MODEL_KINDS)}"),
]
