"""Replica discovery and health checks of an ``openai_http`` model (its ``discovery:`` block); a
``kind: vllm`` model's process settings are in vllm.py.

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


