"""How an embedded model's engine core is supervised: restart backoff, request wait, liveness.

```yaml
models:
  - name: local
    model: Qwen/Qwen2.5-0.5B-Instruct
    supervision: {restart_wait_s: 30, max_restart_failures: 5}
```
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SupervisionSettings(BaseModel):
    """Read by ``blink.backends.engine_supervisor``; one block per embedded model."""

    model_config = ConfigDict(extra="forbid")

    # How long a request arriving while the core restarts waits for it before a 503
    # ``engine_unavailable``: a small model reloads in seconds, and 30 s stays inside the client
    # timeouts people set (the openai client's default is 600 s, proxies' idle timeouts 60 s).
    restart_wait_s: float = Field(30.0, ge=0)
    # Delay before the second restart attempt in a row, doubled per further failure up to the
    # cap; the first attempt after a core that ran stably is immediate.
    restart_backoff_s: float = Field(0.5, gt=0)
    restart_backoff_max_s: float = Field(30.0, gt=0)
    # Consecutive failures (a restart that did not come up, or a core that died again before
    # ``stable_after_s``) after which /health answers 503, so an orchestrator replaces the pod;
    # restarts go on at the capped backoff meanwhile, and a success makes /health 200 again.
    max_restart_failures: int = Field(5, ge=1)
    # A core that has run this long wipes the failure count: its next death is a fresh incident.
    stable_after_s: float = Field(60.0, gt=0)
