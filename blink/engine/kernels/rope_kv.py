"""Build ``torch.ops.blink.rope_write_kv`` (rope_kv.cpp): a layer's RoPE on q and k and its K/V
cache write as one call.

In the eager forward, rotary embeddings were ~8 aten ops per layer (chunk, four multiplies, a
subtract, an add, a cat) and the cache write two ``index_copy_``; in a prefill they are passes
over every q/k element, and in a small eager decode step (the GEMM path AMX hosts use from
``decode_gemm_rows`` rows on) Python's dispatch of those ops is a large share of the layer. The
kernel rounds at eager's points, so :func:`rope_write_kv` returns eager's tensors and cache
contents, or ``None`` where it does not serve the call (the caller keeps apply_rotary +
write_kv): fp16 or a cache of another dtype (fp8/int8), a graph being compiled (compiled_decode
keeps aten's ops, which Inductor fuses), autograd, no AVX-512, no compiler, a failed build.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

from blink.engine.kernels.build import build_where_avx512, load_extension

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("rope_kv.cpp")  # includes bf16_simd.h
# fp32 must round each product and each sum as eager's separate ops do: no FMA contraction.
_CFLAGS = ["-ffp-contract=off"]
_DTYPES = (torch.bfloat16, torch.float32)


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    if not load_extension("blink_rope_kv", [_SOURCE], _CFLAGS):
        return False

    @torch.library.register_fake("blink::rope_write_kv")
    def _fake(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
        slots: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape), k.new_empty(k.shape)

    log.info("rotary embedding + K/V cache write run as blink::rope_write_kv (AVX-512)")
    return True


@functools.cache
def rope_kv_available() -> bool:
    """True when the op can be used (builds it on the first call)."""
    return build_where_avx512("fused rope + KV write", "using apply_rotary and write_kv", _build)


def rope_write_kv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    slots: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(apply_rotary(q, cos, sin), apply_rotary(k, cos, sin))`` with the rotated k and ``v``
    written to ``k_cache``/``v_cache`` at ``slots`` as ``write_kv`` does, or ``None`` (nothing
    written) where the kernel does not serve these tensors.

    ``q [T, H, D]``, ``k``/``v [T, KVH, D]`` (strided views of the fused qkv output are fine),
    ``cos``/``sin`` from ``RotaryEmbedding.lookup`` (``[T, 1, D/2]``), caches
    ``[blocks, block_size, KVH, D]``.
    """
    dtype = q.dtype
    if (
        dtype not in _DTYPES
        or q.device.type != "cpu"
        or k_cache.dtype != dtype
        or cos.dtype != dtype
        or torch.compiler.is_compiling()
        or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
        or not rope_kv_available()
    ):
        return None
    q_rot, k_rot = torch.ops.blink.rope_write_kv(q, k, v, cos, sin, slots, k_cache, v_cache)
    return q_rot, k_rot
