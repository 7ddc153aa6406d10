"""The kernel switches' environment overrides: documented here, read here, nowhere else.

Each of Blink's hand-written CPU kernels is an ``EngineConfig`` field, on by default and turned
off only for A/B comparisons and fallback tests. An environment variable may turn one off for a
process without editing its configuration (a benchmark's A/B round, an operator ruling a kernel
out); any other value leaves the field as configured:

==========================  =========  ===========================  =============================
variable                    off value  field                        kernel
==========================  =========  ===========================  =============================
``BLINK_INT8_KERNEL``       ``aten``   ``int8_kernel``              int8 decode rows (int8_gemv.py)
``BLINK_W8A8_KERNEL``       ``off``    ``w8a8_kernel``              int8-w8a8 prefill (w8a8.py)
``BLINK_FUSED_DECODE``      ``off``    ``fused_decode``             one-call decode (decode_step.py)
``BLINK_DECODE_ATTENTION``  ``sdpa``   ``decode_attention_kernel``  paged attention (attention.py)
``BLINK_PREFILL_OPS``       ``aten``   ``prefill_ops``              fused norm/SiLU/rope (prefill_ops.py, rope_kv.py)
==========================  =========  ===========================  =============================

The model runner applies them once, when it builds its model; the kernel modules read no
environment (their ``*_available()`` says only whether the kernel builds and runs here).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from blink.engine.config import EngineConfig

# variable -> (the value that turns it off, the EngineConfig field it overrides)
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "BLINK_INT8_KERNEL": ("aten", "int8_kernel"),
    "BLINK_W8A8_KERNEL": ("off", "w8a8_kernel"),
    "BLINK_FUSED_DECODE": ("off", "fused_decode"),
    "BLINK_DECODE_ATTENTION": ("sdpa", "decode_attention_kernel"),
    "BLINK_PREFILL_OPS": ("aten", "prefill_ops"),
}


def with_env_overrides(config: EngineConfig, environ: Mapping[str, str] | None = None) -> EngineConfig:
    """``config`` with the kernels the environment switches off turned off (itself when none are)."""
    env = os.environ if environ is None else environ
    off = {field: False for var, (value, field) in ENV_OVERRIDES.items() if env.get(var, "").lower() == value}
    return config.model_copy(update=off) if off else config
