"""Decode attention as one opaque custom op, so ``torch.compile`` can capture the rest of a step.

The compiled decode graph fuses everything between attention calls (norms, rope, activations)
but must not trace the paged-cache writes: functionalising an in-place write into a
multi-hundred-MB cache tensor copies the whole pool.

The op is declared with no mutated arguments although it writes ``k_cache``/``v_cache`` in
place. Every layer's caches are views of one pool tensor (model_runner), and AOT autograd
handles a mutated input that aliases another input by cloning their common base: declared as
mutating, each compiled call copied the entire KV pool and back (inductor's output code showed
it; RESULTS.md, "Batch-1 decode: where the time goes"). Nothing else in the
graph reads the caches, and the op's output feeds the rest of the layer, so the graph cannot
drop or reorder the writes; the writes are only ever read by later calls of this op.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from blink.engine.kv_cache_dtype import write_kv


@torch.library.custom_op("blink::paged_decode_attention", mutates_args=())
def paged_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """``q [B, H, D]``, ``k``/``v [B, KVH, D]``; caches ``[blocks, block_size, KVH, D]`` -> ``[B, H * D]``.

    ``k_scale``/``v_scale`` (``[blocks, block_size, KVH]`` fp32) are an int8 cache's row scales.
    """
    batch, heads, dim = q.shape
    kvh = k.shape[1]
    k_flat = k_cache.view(-1, kvh, dim)
    v_flat = v_cache.view(-1, kvh, dim)
    write_kv(k_flat, slot_mapping, k, None if k_scale is None else k_scale.view(-1, kvh))
    write_kv(v_flat, slot_mapping, v, None if v_scale is None else v_scale.view(-1, kvh))
    flat = block_tables.reshape(-1)
    shape = (batch, -1, kvh, dim)
    keys = k_cache.view(k_cache.shape[0], -1).index_select(0, flat).view(shape)
    values = v_cache.view(v_cache.shape[0], -1).index_select(0, flat).view(shape)
    if k_scale is not None and v_scale is not None:
        keys = keys.float() * k_scale.view(k_scale.shape[0], -1).index_select(0, flat).view(batch, -1, kvh, 1)
        values = values.float() * v_scale.view(v_scale.shape[0], -1).index_select(0, flat).view(batch, -1, kvh, 1)
    keys, values = keys.transpose(1, 2), values.transpose(1, 2)
    out = F.scaled_dot_product_attention(
        q.reshape(batch, kvh, heads // kvh, dim),
        keys.to(q.dtype),
        values.to(q.dtype),
        attn_mask=mask,
        scale=scale,
    )
    return out.reshape(batch, heads * dim)


@paged_decode_attention.register_fake
def _(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    return q.new_empty(q.shape[0], q.shape[1] * q.shape[2])
