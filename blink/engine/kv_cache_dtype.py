"""The KV cache's storage dtype: the model's own ("auto"), fp8 (e4m3) or int8, and writes into it.

CPU decode at long contexts streams the whole cache once per step, so its bytes bound the step's
speed and, for a fixed ``kv_cache_memory_bytes``, the number of blocks (concurrent context). fp8
halves both against bf16. Values are stored with a per-tensor scale of 1.0, vLLM's default for
``kv_cache_dtype="fp8"`` without calibration: e4m3 keeps 3 mantissa bits from 2^-6 up to ±448, where K/V activations usually sit;
larger outliers saturate.
int8 stores each (token, KV head) row with its own symmetric scale (amax / 127, fp32, in a
``[blocks, block_size, KV heads]`` tensor beside the cache): 7 bits at the row's own magnitude, so
no outlier range to guess, for head_dim + 4 bytes per row (1.88x bf16's blocks at head_dim 64).
Reads widen back to the compute dtype (gather + ``.to``, times the scales for int8, on the SDPA
path; a byte -> fp32 widening inside blink::decode_attention_cpu / decode_attention_scaled_cpu).
"""

from __future__ import annotations

import torch

from blink.engine.errors import EngineError

KV_CACHE_DTYPES = ("auto", "fp8", "int8")
INT8 = torch.int8
# Symmetric int8: [-127, 127] (not -128), so a row's amax maps to exactly ±127.
INT8_MAX = 127.0
FP8 = torch.float8_e4m3fn
# The largest finite e4m3fn value (S.1111.110 = 1.75 * 2^8); the format has no infinity.
FP8_MAX = 448.0


class KVCacheDtypeError(EngineError):
    """An unknown ``kv_cache_dtype`` or one the device/model dtype cannot serve."""


def resolve_kv_cache_dtype(name: str, model_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The cache tensor's dtype for ``EngineConfig.kv_cache_dtype``; raises at engine start."""
    if name == "auto":
        return model_dtype
    if name not in KV_CACHE_DTYPES:
        raise KVCacheDtypeError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {name!r}")
    if device.type != "cpu":
        # The writes and the decode kernel's widening are CPU code; CUDA would want its own kernels.
        raise KVCacheDtypeError(f"kv_cache_dtype={name!r} is implemented for the CPU only, not {device.type}")
    if model_dtype not in (torch.bfloat16, torch.float32):
        raise KVCacheDtypeError(f"kv_cache_dtype={name!r} needs a bfloat16 or float32 model, not {model_dtype}")
    return FP8 if name == "fp8" else INT8


def has_scales(cache_dtype: torch.dtype) -> bool:
    """Whether a cache of this dtype keeps per-(token, KV head) scales beside it (int8)."""
    return cache_dtype == INT8


def to_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [..., D]`` as int8 rows and their fp32 scales ``[...]`` (row = q * scale).

    An all-zero row gets scale 1 (any scale reads back zeros) rather than a division by zero.
    """
    amax = x.abs().amax(-1).float()
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    q = (x.float() / scale.unsqueeze(-1)).round_().clamp_(-INT8_MAX, INT8_MAX).to(INT8)
    return q, scale


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to e4m3fn, saturating at ±448.

    Clamp before the cast: e4m3fn has no infinity, and whether an out-of-range value saturates
    or becomes NaN depends on the conversion (c10's saturates; CUDA's non-saturating one gives
    NaN). One NaN key would poison every later softmax over its sequence; a clamped one only
    loses magnitude.
    """
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def as_cached(x: torch.Tensor, cache_dtype: torch.dtype) -> torch.Tensor:
    """``x`` as a cache of ``cache_dtype`` holds it, in ``x``'s dtype.

    A fresh prefill chunk attends to its own K/V without reading the cache; with an fp8 cache it
    must see the rounded values too, or a prompt's logits would depend on whether its prefix was
    computed in this step, in an earlier chunk, or served by the prefix cache.
    """
    if cache_dtype == INT8:
        q, scale = to_int8(x)
        return (q.float() * scale.unsqueeze(-1)).to(x.dtype)
    return to_fp8(x).to(x.dtype) if cache_dtype == FP8 else x


def write_kv(
    flat_cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor, flat_scales: torch.Tensor | None = None
) -> None:
    """``flat_cache[slots] = x`` (``flat_cache [slots, KVH, D]``), rounding to the cache's dtype;
    an int8 cache's row scales go to ``flat_scales [slots, KVH]``."""
    if flat_cache.dtype == INT8:
        if flat_scales is None:
            raise KVCacheDtypeError("an int8 KV cache needs its scales")
        q, scale = to_int8(x)
        flat_cache.index_copy_(0, slots, q)
        flat_scales.index_copy_(0, slots, scale)
        return
    if flat_cache.dtype != FP8:
        flat_cache.index_copy_(0, slots, x.to(flat_cache.dtype))
        return
    # index_copy_ has no fp8 kernel on the CPU, so the bytes are copied as uint8.
    flat_cache.view(torch.uint8).index_copy_(0, slots, to_fp8(x).view(torch.uint8))
