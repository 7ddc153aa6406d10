"""Paged attention in plain torch (any device SDPA runs on).

The KV cache holds, per layer, ``[num_blocks, block_size, num_kv_heads, head_dim]`` K and V
tensors; a sequence's position ``p`` lives in slot ``block_table[p // block_size] * block_size +
p % block_size``. Everything that depends only on the batch layout (slots, gathered block tables,
masks) is built once per step in :class:`AttentionMetadata` and shared by every layer, so a layer's
forward is a handful of tensor ops plus one SDPA call per prefill chunk and one for all decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.kernels.attention import (
    decode_attention_cpu,
    decode_attention_scaled_cpu,
    paged_decode_cpu,
    prefill_attention_cpu,
)
from blink.engine.kernels.rope_kv import rope_write_kv
from blink.engine.kv_cache_dtype import FP8, as_cached, has_scales, write_kv
from blink.engine.layers.paged_decode_op import paged_decode_attention


@dataclass
class PrefillChunk:
    """Rows ``[start, end)`` of the flattened batch: one sequence's chunk of ``end - start`` tokens.

    ``context_len`` tokens of the sequence are already cached. With none, the chunk attends to its
    own fresh K/V under a plain causal mask; otherwise it reads ``[0, context_len + n)`` back from
    the cache through ``block_table`` with ``mask`` (``[n, context_len + n]``, True = attend).
    """

    start: int
    end: int
    context_len: int
    block_table: torch.Tensor | None = None
    mask: torch.Tensor | None = None


@dataclass
class AttentionMetadata:
    """Per-step batch layout: decode rows first (``[0, num_decode)``), then prefill chunks."""

    slot_mapping: torch.Tensor  # [T] int64, cache slot of every scheduled token
    num_decode: int = 0
    decode_block_tables: torch.Tensor | None = None  # [num_decode, max_blocks] int64 (padded)
    decode_mask: torch.Tensor | None = None  # [num_decode, 1, 1, max_blocks * block_size] bool or additive float
    decode_context_lens: torch.Tensor | None = None  # [num_decode] int64, cached positions each decode reads
    prefills: list[PrefillChunk] = field(default_factory=list)
    decode_workspace: torch.Tensor | None = None  # gather scratch shared by all layers


class PagedAttention(nn.Module):
    """Writes this step's K/V into the paged cache, then attends each query to its sequence's keys."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.group = num_heads // num_kv_heads
        # Assigned by the model runner once the pool is allocated. Non-persistent buffers (never
        # saved): torch.compile lifts buffers as graph inputs, while a plain tensor attribute
        # was baked into the compiled graph as a constant and its writes were lost.
        self.k_cache: torch.Tensor
        self.v_cache: torch.Tensor
        self.register_buffer("k_cache", torch.empty(0), persistent=False)
        self.register_buffer("v_cache", torch.empty(0), persistent=False)
        # Per-(slot, KV head) fp32 scales of an int8 cache ([num_blocks, block_size, KVH]); empty
        # for any other cache dtype (blink/engine/kv_cache_dtype.py).
        self.k_scale: torch.Tensor
        self.v_scale: torch.Tensor
        self.register_buffer("k_scale", torch.empty(0), persistent=False)
        self.register_buffer("v_scale", torch.empty(0), persistent=False)
        # Set by the model runner where blink::decode_attention_cpu is built (kernels/attention.py):
        # eager decodes then read the paged cache in place instead of gather + SDPA.
        self.decode_kernel = False
        # Likewise blink::prefill_attention_cpu for a fresh bf16 chunk's causal attention.
        self.prefill_kernel = False

    def rotate_and_write(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Rotated ``(q, k)`` with this step's K/V already in the cache (one blink::rope_write_kv
        call, kernels/rope_kv.py): then call :meth:`forward` with ``kv_written=True``. ``None``
        (nothing written) where the kernel does not serve the call: rotate and write as before."""
        return rope_write_kv(q, k, v, cos, sin, meta.slot_mapping, self.k_cache, self.v_cache)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        meta: AttentionMetadata,
        kv_written: bool = False,
    ) -> torch.Tensor:
        """``q [T, H, D]``, ``k``/``v [T, KVH, D]`` -> ``[T, H * D]``; ``kv_written``: the caller
        wrote k/v into the cache already (:meth:`rotate_and_write`)."""
        if torch.compiler.is_compiling() and not meta.prefills:
            # The compiled decode graph (blink.engine.compiled_decode) sees one opaque node.
            mask = cast(torch.Tensor, meta.decode_mask)
            tables = cast(torch.Tensor, meta.decode_block_tables)
            if self.decode_kernel and self._kernel_reads_cache(q) and not self._scaled:
                # The eager path's kernel (no Python in the graph), so compiled and eager decodes
                # agree bit for bit; the mask is 0 exactly on each sequence's cached prefix.
                lens = meta.decode_context_lens
                if lens is None:
                    lens = (mask.reshape(q.shape[0], -1) == 0).sum(-1)
                return paged_decode_cpu(
                    q, k, v, self.k_cache, self.v_cache, meta.slot_mapping, tables, lens, self.scale
                )
            scales = (self.k_scale, self.v_scale) if self._scaled else (None, None)
            return paged_decode_attention(
                q, k, v, self.k_cache, self.v_cache, meta.slot_mapping, tables, mask, self.scale, *scales
            )
        kvh, dim = self.num_kv_heads, self.head_dim
        k_flat = self.k_cache.view(-1, kvh, dim)
        v_flat = self.v_cache.view(-1, kvh, dim)
        scaled = self._scaled
        if not kv_written:
            write_kv(k_flat, meta.slot_mapping, k, self.k_scale.view(-1, kvh) if scaled else None)
            write_kv(v_flat, meta.slot_mapping, v, self.v_scale.view(-1, kvh) if scaled else None)

        if meta.prefills:
            k, v = as_cached(k, self.k_cache.dtype), as_cached(v, self.k_cache.dtype)
        outputs: list[torch.Tensor] = []
        if meta.num_decode:
            outputs.append(self._decode(q[: meta.num_decode], meta))
        for chunk in meta.prefills:
            outputs.append(self._prefill(q, k, v, chunk))
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    @property
    def _scaled(self) -> bool:
        """An int8 cache: rows times their per-(slot, KV head) scales."""
        return has_scales(self.k_cache.dtype)

    def _kernel_reads_cache(self, q: torch.Tensor) -> bool:
        """blink::decode_attention_cpu reads a cache of q's dtype or an fp8 one (widened per byte);
        decode_attention_scaled_cpu an int8 one."""
        return q.dtype == self.k_cache.dtype or self.k_cache.dtype == FP8 or self._scaled

    def _gather_kv(
        self, tables: torch.Tensor, workspace: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the whole blocks named by ``tables`` (any shape), each ``[slots, KVH, D]``.

        ``index_select`` on a 2-D view copies whole blocks; advanced indexing on the 4-D cache
        was several times slower on the CPU (benchmarks/RESULTS.md, "Figures behind the code's numbers", attention).
        """
        flat = tables.reshape(-1)
        k_rows = self.k_cache.view(self.k_cache.shape[0], -1)
        v_rows = self.v_cache.view(self.v_cache.shape[0], -1)
        if workspace is None:
            keys, values = k_rows.index_select(0, flat), v_rows.index_select(0, flat)
        else:
            keys, values = workspace[0], workspace[1]
            torch.index_select(k_rows, 0, flat, out=keys)
            torch.index_select(v_rows, 0, flat, out=values)
        shape = (-1, self.num_kv_heads, self.head_dim)
        keys, values = keys.view(shape), values.view(shape)
        if self._scaled:  # int8 rows times their scales: fp32
            scale_shape = (-1, self.num_kv_heads, 1)
            k_scales = self.k_scale.view(self.k_scale.shape[0], -1).index_select(0, flat).view(scale_shape)
            v_scales = self.v_scale.view(self.v_scale.shape[0], -1).index_select(0, flat).view(scale_shape)
            keys, values = keys.float() * k_scales, values.float() * v_scales
        return keys, values

    def _decode_workspace(self, meta: AttentionMetadata, rows: int) -> torch.Tensor:
        """Scratch for the decode gather, made by the first layer and reused by the others.

        A fresh multi-MB buffer per layer costs page faults that a reused one does not (same
        RESULTS.md section).
        """
        cache = self.k_cache
        workspace = meta.decode_workspace
        if workspace is None or workspace.shape[1] != rows or workspace.dtype != cache.dtype:
            workspace = torch.empty(2, rows, cache[0].numel(), dtype=cache.dtype, device=cache.device)
            meta.decode_workspace = workspace
        return workspace

    def _decode(self, q: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        # One query per sequence: fold the query heads of each KV head into the query-length axis
        # ([B, KVH, group, D], a view), so GQA needs no K/V repeat and one masked SDPA covers all.
        batch = q.shape[0]
        tables = cast(torch.Tensor, meta.decode_block_tables)  # set whenever num_decode > 0
        if self.decode_kernel and meta.decode_context_lens is not None and self._kernel_reads_cache(q):
            lens = meta.decode_context_lens
            if self._scaled:
                out = decode_attention_scaled_cpu(
                    q, self.k_cache, self.v_cache, self.k_scale, self.v_scale, tables, lens, self.scale
                )
            else:
                out = decode_attention_cpu(q, self.k_cache, self.v_cache, tables, lens, self.scale)
            return out.view(batch, self.num_heads * self.head_dim)
        keys, values = self._gather_kv(tables, self._decode_workspace(meta, tables.numel()))
        shape = (batch, -1, self.num_kv_heads, self.head_dim)
        out = F.scaled_dot_product_attention(
            q.view(batch, self.num_kv_heads, self.group, self.head_dim),
            keys.view(shape).transpose(1, 2).to(q.dtype),
            values.view(shape).transpose(1, 2).to(q.dtype),
            attn_mask=meta.decode_mask,
            scale=self.scale,
        )
        return out.reshape(batch, self.num_heads * self.head_dim)

    def _prefill(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: PrefillChunk
    ) -> torch.Tensor:
        n = chunk.end - chunk.start
        query = q[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if chunk.block_table is None and self.prefill_kernel and q.dtype == torch.bfloat16:
            rows = slice(chunk.start, chunk.end)
            out = prefill_attention_cpu(q[rows], k[rows], v[rows], self.scale)
            return out.view(n, self.num_heads * self.head_dim)
        if chunk.block_table is None:
            keys = k[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)
            values = v[chunk.start : chunk.end].transpose(0, 1).unsqueeze(0)
            out = F.scaled_dot_product_attention(
                query, keys, values, is_causal=True, scale=self.scale, enable_gqa=self.group > 1
            )
        else:
            total = chunk.context_len + n
            keys, values = self._gather_kv(chunk.block_table)
            keys, values = keys[:total], values[:total]
            out = F.scaled_dot_product_attention(
                query,
                keys.transpose(0, 1).unsqueeze(0).to(q.dtype),
                values.transpose(0, 1).unsqueeze(0).to(q.dtype),
                attn_mask=chunk.mask,
                scale=self.scale,
                enable_gqa=self.group > 1,
            )
        return out.squeeze(0).transpose(0, 1).reshape(n, self.num_heads * self.head_dim)
