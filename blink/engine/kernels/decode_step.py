"""Build ``torch.classes.blink.DecodeStep`` (decode_step.cpp): a decode step in one C++ call.

The C++ object holds the model's weights once; each step passes only its per-step tensors
(token ids, positions, slots, block tables, context lengths) and gets float32 logits back. It
replaces, for steps of up to :data:`MAX_ROWS` rows (one per decoded token, or the 1 + K tokens of
a speculative verification span: model_runner.execute_spans picks them), both the eager forward
(~25 dispatched ops per layer) and the compiled graph (Dynamo guards on every weight, a Python
wrapper, ~100 small OpenMP regions per step): see decode_step.cpp for the measured overheads.

Only a Llama-family model (checked by its attributes) in bf16 on an AVX-512 CPU, with every
linear an int8 weight-only layer without padding, is eligible; its KV cache may be bf16, fp8 or
int8 (``kv_cache_dtype``: written and read as the eager path does, decode_attention.h). Anything missing (another model
or dtype, no AVX-512, no compiler, a failed build, ``fused_decode: false``) logs one line
and the engine keeps its other decode paths.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from blink.engine.kernels.build import build_where_avx512, load_extension
from blink.engine.kv_cache_dtype import FP8, INT8, has_scales

log = logging.getLogger(__name__)

# Decode rows one fused call serves (the kernel takes up to int8_matmul.h's kMaxRows = 64). Beyond
# this the eager step's oneDNN-packed bf16 GEMMs win (benchmarks/decode_compile.py --batch N;
# RESULTS.md, "Figures behind the code's numbers", decode_step).
MAX_ROWS = 32
_SOURCE = Path(__file__).with_name("decode_step.cpp")
# The shared int8 matmul kernel the step is built on (engineer-owned header; see decode_step.cpp).
_MATMUL_HEADER = Path(__file__).with_name("int8_matmul.h")
# The vector width the kernels read K and head_dim in.
_LANES = 16


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    if not _MATMUL_HEADER.exists():
        log.warning("fused decode step unavailable: %s is missing", _MATMUL_HEADER.name)
        return False
    return load_extension("blink_decode_step", [_SOURCE])


def fused_decode_available() -> bool:
    """True when ``torch.classes.blink.DecodeStep`` can be used (builds it on the first call)."""
    return build_where_avx512("fused decode step", "per-op decode path", _build)


class Ineligible(Exception):
    """Why a model cannot run the fused step (a log line, never an error to a caller)."""


@dataclass
class FusedDecode:
    """A built step for one model and KV pool: ``serves(rows)``, then call it per step."""

    step: Any  # torch.classes.blink.DecodeStep
    max_rows: int

    def serves(self, rows: int) -> bool:
        return 1 <= rows <= self.max_rows

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
    ) -> torch.Tensor:
        """Float32 logits ``[M, vocab]``; writes this step's K/V into the model's caches."""
        return self.step.run(input_ids, positions, slot_mapping, block_tables, context_lens)


def _linear(module: Any, what: str) -> list[torch.Tensor]:
    """``[int8 weight, bf16 scales, bf16 bias or empty]`` of an int8 weight-only layer."""
    q, scales = getattr(module, "qweight", None), getattr(module, "scales", None)
    if q is None or scales is None or q.dtype != torch.int8 or q.dim() != 2:
        raise Ineligible(f"{what} is not an int8 weight-only linear")
    if q.shape[1] != getattr(module, "in_features", -1) or q.shape[1] % _LANES:
        raise Ineligible(f"{what}: input width {q.shape[1]} is padded or not a multiple of {_LANES}")
    bias = getattr(module, "bias", None)
    if scales.dtype != torch.bfloat16 or (bias is not None and bias.dtype != torch.bfloat16):
        raise Ineligible(f"{what}: scales/bias not bf16")
    return [q, scales, torch.empty(0) if bias is None else bias.detach()]


def _norm(module: Any, eps: float, what: str) -> torch.Tensor:
    weight = getattr(module, "weight", None)
    if weight is None or weight.dtype != torch.bfloat16 or getattr(module, "eps", None) != eps:
        raise Ineligible(f"{what} is not a bf16 RMSNorm with eps {eps}")
    return weight.detach()


def _tensors(model: Any) -> tuple[list[int], float, float, list[torch.Tensor], list[torch.Tensor]]:
    """The constructor arguments of ``DecodeStep`` (dims, eps, attention scale, globals, layers)."""
    stack, shape, head = getattr(model, "model", None), getattr(model, "shape", None), getattr(model, "lm_head", None)
    parts = ("embed_tokens", "rotary_emb", "layers", "norm")
    if stack is None or shape is None or head is None or not all(hasattr(stack, p) for p in parts):
        raise Ineligible("not a Llama-family model")
    embed = stack.embed_tokens.weight
    if embed.device.type != "cpu" or embed.dtype != torch.bfloat16:
        raise Ineligible(f"{embed.dtype} on {embed.device.type} (needs bf16 on the CPU)")
    cache_dtype = stack.layers[0].self_attn.attn.k_cache.dtype
    if cache_dtype not in (torch.bfloat16, FP8, INT8):
        raise Ineligible(f"KV cache is {cache_dtype} (the step reads bf16, fp8 or int8)")
    if shape.head_dim % _LANES:
        raise Ineligible(f"head_dim {shape.head_dim} is not a multiple of {_LANES}")
    if not getattr(head, "float_output", False):
        raise Ineligible("the LM head does not return float32 logits")
    eps = float(shape.rms_norm_eps)
    qk_norm = stack.layers[0].self_attn.q_norm is not None
    layers: list[torch.Tensor] = []
    scale = None
    for i, layer in enumerate(stack.layers):
        attn, mlp = layer.self_attn, layer.mlp
        if (attn.q_norm is not None) != qk_norm:
            raise Ineligible("layers disagree on q/k norms")
        scale = attn.attn.scale
        none = torch.empty(0)
        layers += [_norm(layer.input_layernorm, eps, f"layer {i} input norm")]
        layers += _linear(attn.qkv_proj, f"layer {i} qkv")
        layers += [_norm(attn.q_norm, eps, "q norm"), _norm(attn.k_norm, eps, "k norm")] if qk_norm else [none, none]
        layers += _linear(attn.o_proj, f"layer {i} o_proj")
        layers += [_norm(layer.post_attention_layernorm, eps, f"layer {i} post norm")]
        layers += _linear(mlp.gate_up_proj, f"layer {i} gate_up")
        layers += _linear(mlp.down_proj, f"layer {i} down")
        layers += [attn.attn.k_cache, attn.attn.v_cache]
        # An int8 cache's row scales (kv_cache_dtype="int8"); other caches have none.
        layers += [attn.attn.k_scale, attn.attn.v_scale] if has_scales(cache_dtype) else [none, none]
    lm = _linear(head, "lm_head")[:2]
    dims = [
        shape.hidden_size, shape.intermediate_size, shape.num_heads, shape.num_kv_heads,
        shape.head_dim, shape.vocab_size, int(qk_norm),
    ]
    # F.silu of every bf16 bit pattern: the step looks bf16(silu(gate)) up instead of computing it.
    silu = F.silu(torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16))
    silu_table = torch.cat([silu[2**15 :], silu[: 2**15]])  # indexed by the unsigned bit pattern
    globals_ = [embed.detach(), _norm(stack.norm, eps, "final norm"), *lm, stack.rotary_emb.cos_sin, silu_table]
    return dims, eps, float(scale or shape.head_dim**-0.5), globals_, layers


def build_fused_decode(model: Any, max_rows: int = MAX_ROWS) -> FusedDecode | None:
    """The fused step for ``model`` (its KV caches already assigned), or None with a log line."""
    try:
        args = _tensors(model)
    except Ineligible as exc:
        log.info("fused decode step not used: %s", exc)
        return None
    if not fused_decode_available():
        return None
    step = torch.classes.blink.DecodeStep(*args)
    log.info("decode and verification steps of 1-%d rows run the fused C++ step (blink::DecodeStep)", max_rows)
    return FusedDecode(step, max_rows)
