"""Build and load ``torch.ops.blink.decode_attention_cpu`` (decode_attention.cpp, prefill_attention.cpp) on demand.

The eager decode path uses it for bf16 caches on AVX-512 CPUs; anything missing (another CPU,
no compiler, a failed build, ``decode_attention_kernel: false``) keeps the gather + SDPA path, so
engine start never fails for want of a compiler. Built once per machine by
``torch.utils.cpp_extension.load`` (cached in torch's extensions directory).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

from blink.engine.kernels.build import build_where_avx512, load_extension

log = logging.getLogger(__name__)

_SOURCES = [Path(__file__).with_name(name) for name in ("decode_attention.cpp", "prefill_attention.cpp")]


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    # -mavx512bf16: only prefill_attention_cpu executes those instructions, and it is only called
    # where the CPU reports avx512_bf16 (prefill_kernel_available).
    if not load_extension("blink_decode_attention", _SOURCES, ["-mavx512bf16"]):
        return False

    @torch.library.register_fake("blink::prefill_attention_cpu")
    def _fake_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.empty_like(q)

    @torch.library.register_fake("blink::paged_decode_cpu")
    def _fake_paged(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        tables: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        return q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))

    @torch.library.register_fake("blink::decode_attention_scaled_cpu")
    def _fake_scaled(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k_scale: torch.Tensor,
        v_scale: torch.Tensor,
        tables: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        return torch.empty_like(q)

    @torch.library.register_fake("blink::decode_attention_cpu")
    def _fake(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        tables: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        return torch.empty_like(q)

    return True


def decode_kernel_available() -> bool:
    """True when ``torch.ops.blink.decode_attention_cpu`` can be used (builds it on first call)."""
    return build_where_avx512("decode attention kernel", "using SDPA", _build)


@functools.cache
def _cpu_has_avx512_bf16() -> bool:
    """``avx512_bf16`` in the kernel's CPU flags (Linux); False where they cannot be read."""
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def prefill_kernel_available() -> bool:
    """True when ``torch.ops.blink.prefill_attention_cpu`` can run here (AVX512-BF16 CPUs)."""
    return decode_kernel_available() and _cpu_has_avx512_bf16()


def prefill_attention_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention of a chunk's ``q [n, H, D]`` over its own ``k``/``v [n, KVH, D]`` (bf16) -> ``[n, H, D]``."""
    return torch.ops.blink.prefill_attention_cpu(q, k, v, scale)


def decode_attention_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """``q [B, H, D]`` against the first ``lens[b]`` cached positions of each sequence -> ``[B, H, D]``."""
    return torch.ops.blink.decode_attention_cpu(q, k_cache, v_cache, block_tables, lens, scale)


def decode_attention_scaled_cpu(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """:func:`decode_attention_cpu` over an int8 cache whose rows are times their fp32 scales
    (``[blocks, block_size, KVH]``, kv_cache_dtype="int8")."""
    return torch.ops.blink.decode_attention_scaled_cpu(q, k_cache, v_cache, k_scale, v_scale, block_tables, lens, scale)


def paged_decode_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One compiled decode step of a layer: ``k``/``v [B, KVH, D]`` into their slots, then
    :func:`decode_attention_cpu` -> ``[B, H * D]`` (an opaque op in the graph, no Python)."""
    return torch.ops.blink.paged_decode_cpu(q, k, v, k_cache, v_cache, slot_mapping, block_tables, lens, scale)
