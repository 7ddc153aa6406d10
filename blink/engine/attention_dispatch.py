"""Which kernel runs a fresh bf16 prefill chunk's causal attention, by CPU class.

Blink's own AVX-512 kernel (blink::prefill_attention_cpu) is the faster one on CPUs without AMX.
On a CPU with AMX, torch's flash-attention CPU path (``scaled_dot_product_attention``) does its
block matmuls through oneDNN's bf16 GEMMs, which run on the AMX tiles, while Blink's kernel stays
on AVX-512 and was measured as most of a long prefill there (the AMX profile in
benchmarks/RESULTS.md, issue #23). The choice is made once, at engine start, and logged.
"""

from __future__ import annotations

from typing import Literal

from blink.engine.cpu_features import CpuFeatures
from blink.engine.errors import EngineError

PrefillAttention = Literal["kernel", "sdpa"]
PREFILL_ATTENTION_SETTINGS = ("auto", "kernel", "sdpa")


def choose_prefill_attention(setting: str, cpu: CpuFeatures, kernel_usable: bool) -> PrefillAttention:
    """``setting`` is "auto", "kernel" or "sdpa"; "kernel" where it cannot run (no AVX512-BF16,
    no compiler, an unsupported head size) falls back to SDPA, which runs everywhere."""
    if setting not in PREFILL_ATTENTION_SETTINGS:
        raise EngineError(f"prefill_attention must be one of {PREFILL_ATTENTION_SETTINGS}, got {setting!r}")
    if not kernel_usable or setting == "sdpa":
        return "sdpa"
    if setting == "kernel":
        return "kernel"
    return "sdpa" if cpu.amx else "kernel"
