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

from blink.config.compression import CompressionSettings
from blink.config.discovery import DiscoverySettings
from blink.config.supervision import SupervisionSettings
from blink.config.vllm import VllmSettings
from blink.engine.config import EngineConfig

DEFAULT_EMBEDDED_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

# How tool calls are read from an embedded model's output: a format, "auto" (the one the chat
# template shows; Hermes for a template that cannot render tools, which Blink then writes in that
# format: blink/backends/tool_prompt.py) or "none" (blink/backends/tool_parsers.py).
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


class EmbeddedModel(EngineConfig, _ModelBase):
    """A model run in-process by Blink's engine: the engine's own settings (``EngineConfig``,
    declared once in blink/engine/config.py) plus what the server adds around the engine."""

    kind: Literal["embedded"] = "embedded"
    # Hugging Face id, local folder or .gguf file.
    model: str = DEFAULT_EMBEDDED_MODEL
    # How tool calls are read from the model's output; "auto" picks the format its chat template
    # shows (<tool_call> -> hermes, [TOOL_CALLS] -> mistral, <|python_tag|> -> llama3_json).
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
