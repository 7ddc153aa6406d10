"""Which kernel runs a fresh bf16 prefill chunk's causal attention: raced once at engine start.

Blink's own AVX-512 kernel (blink::prefill_attention_cpu) and torch's flash-attention CPU path
(``scaled_dot_product_attention``, whose block matmuls are oneDNN bf16 GEMMs and run on AMX
tiles where a CPU has them) win on different CPU classes, and a table by class proved fragile:
the AMX measurement that made SDPA the AMX default was taken while the kernel made subnormals, a
cost Intel cores pay and AMD cores do not (kernels/simd_exp.h). So ``auto`` times both on a
synthetic chunk of the model's own head shape and keeps the faster; the race costs tens of
milliseconds once. The choice and both timings are logged.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from blink.engine.errors import EngineError
from blink.engine.kernels.attention import prefill_attention_cpu

PrefillAttention = Literal["kernel", "sdpa"]
PREFILL_ATTENTION_SETTINGS = ("auto", "kernel", "sdpa")
# The race's chunk: long enough that attention, not call overhead, is what is timed (it grows with
# the square of the length, and long prompts are where TTFT is at stake), short enough to cost
# tens of milliseconds at start.
RACE_TOKENS = 512
RACE_REPS = 3


@dataclass(frozen=True)
class RaceResult:
    """Best single-thread CPU time of each path (ms) and the winner."""

    kernel_ms: float
    sdpa_ms: float

    @property
    def winner(self) -> PrefillAttention:
        return "kernel" if self.kernel_ms <= self.sdpa_ms else "sdpa"


@functools.cache
def race_prefill_attention(heads: int, kv_heads: int, head_dim: int, tokens: int = RACE_TOKENS,
                           reps: int = RACE_REPS) -> RaceResult:
    """Both paths on the same random bf16 chunk, alternated, best of ``reps`` each (a warm-up
    call first), on one thread in thread CPU time: both paths split their work over threads the
    same way, and CPU time on one thread is what a busy machine (another engine, a test run)
    disturbs least; wall time with two threads flipped the winner under load. Run once per head
    shape and process: a draft model of the target's shape reuses the target's result."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(tokens, heads, head_dim, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(tokens, kv_heads, head_dim, generator=g).to(torch.bfloat16) for _ in range(2))
    scale = head_dim**-0.5

    def kernel() -> object:
        return prefill_attention_cpu(q, k, v, scale)

    def sdpa() -> object:
        args = [x.transpose(0, 1).unsqueeze(0) for x in (q, k, v)]
        return F.scaled_dot_product_attention(*args, is_causal=True, scale=scale, enable_gqa=heads != kv_heads)

    best = {"kernel": float("inf"), "sdpa": float("inf")}
    paths: dict[str, Callable[[], object]] = {"kernel": kernel, "sdpa": sdpa}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for fn in paths.values():
            fn()
        for _ in range(reps):
            for name, fn in paths.items():
                started = time.thread_time()
                fn()
                best[name] = min(best[name], (time.thread_time() - started) * 1000)
    finally:
        torch.set_num_threads(threads)
    return RaceResult(kernel_ms=best["kernel"], sdpa_ms=best["sdpa"])


def choose_prefill_attention(setting: str, kernel_usable: bool,
                             race: Callable[[], RaceResult]) -> tuple[PrefillAttention, RaceResult | None]:
    """``setting`` is "auto", "kernel" or "sdpa"; "kernel" where it cannot run (no AVX512-BF16,
    no compiler, an unsupported head size) falls back to SDPA, which runs everywhere. ``race`` is
    called only for "auto" with a usable kernel; its result is returned for the log."""
    if setting not in PREFILL_ATTENTION_SETTINGS:
        raise EngineError(f"prefill_attention must be one of {PREFILL_ATTENTION_SETTINGS}, got {setting!r}")
    if not kernel_usable or setting == "sdpa":
        return "sdpa", None
    if setting == "kernel":
        return "kernel", None
    result = race()
    return result.winner, result
