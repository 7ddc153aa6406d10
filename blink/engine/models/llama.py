"""The Llama family in one implementation: Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM2.

They differ only in switches read from the config: QKV bias (Qwen2), per-head q/k RMSNorm
(Qwen3), tied embeddings, grouped-query attention, an explicit ``head_dim`` and the RoPE variant.
Inputs are flattened over the whole batch (``[T]`` token ids and positions); per-step attention
layout comes in :class:`AttentionMetadata`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.errors import UnsupportedModelError
from blink.engine.kernels.prefill_ops import silu_mul
from blink.engine.layers.attention import AttentionMetadata, PagedAttention
from blink.engine.layers.embedding import LMHead, VocabEmbedding
from blink.engine.layers.linear import Linear, MergedLinear
from blink.engine.layers.norm import RMSNorm
from blink.engine.layers.rope import RopeSpec, RotaryEmbedding, apply_rotary


@dataclass(frozen=True)
class LlamaVariant:
    """Architecture switches that the config alone does not spell out."""

    qkv_bias: bool = False
    qk_norm: bool = False


@dataclass(frozen=True)
class LlamaShape:
    """Sizes read once from a Hugging Face config."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool

    @classmethod
    def from_hf_config(cls, config: Any) -> LlamaShape:
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"hidden_act {act!r} is not supported (only 'silu')")
        num_heads = int(config.num_attention_heads)
        num_kv_heads = int(getattr(config, "num_key_value_heads", None) or num_heads)
        if num_heads % num_kv_heads:
            raise UnsupportedModelError(
                f"{num_heads} attention heads do not divide into {num_kv_heads} KV heads"
            )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
        return cls(
            vocab_size=int(config.vocab_size),
            hidden_size=int(config.hidden_size),
            intermediate_size=int(config.intermediate_size),
            num_layers=int(config.num_hidden_layers),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=int(head_dim),
            rms_norm_eps=float(getattr(config, "rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            attention_bias=bool(getattr(config, "attention_bias", False)),
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
        )


class LlamaAttention(nn.Module):
    def __init__(self, shape: LlamaShape, variant: LlamaVariant) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = shape.num_heads, shape.num_kv_heads, shape.head_dim
        self.q_size = shape.num_heads * shape.head_dim
        self.kv_size = shape.num_kv_heads * shape.head_dim
        self.qkv_proj = MergedLinear(
            shape.hidden_size,
            {"q": self.q_size, "k": self.kv_size, "v": self.kv_size},
            bias=variant.qkv_bias or shape.attention_bias,
        )
        self.o_proj = Linear(self.q_size, shape.hidden_size, bias=shape.attention_bias)
        self.q_norm = RMSNorm(shape.head_dim, shape.rms_norm_eps) if variant.qk_norm else None
        self.k_norm = RMSNorm(shape.head_dim, shape.rms_norm_eps) if variant.qk_norm else None
        self.attn = PagedAttention(shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.head_dim**-0.5)
        # EngineConfig.prefill_ops, set by the model runner: False keeps apply_rotary + write_kv.
        self.fused_ops = True

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        tokens = hidden.shape[0]
        qkv = self.qkv_proj(hidden)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(tokens, self.num_heads, self.head_dim)
        k = k.view(tokens, self.num_kv_heads, self.head_dim)
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_ops:
            # Rope of q and k and the cache write in one kernel call where it serves (eager's bits).
            fused = self.attn.rotate_and_write(q, k, v, cos, sin, meta)
            if fused is not None:
                return self.o_proj(self.attn(fused[0], fused[1], v, meta, kv_written=True))
        if self.q_norm is not None:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        else:
            # Q and K sit side by side in the fused output: one rotary pass over both heads' sets
            # halves the rope ops per layer.
            qk = qkv[:, : self.q_size + self.kv_size].view(tokens, -1, self.head_dim)
            q, k = apply_rotary(qk, cos, sin).split([self.num_heads, self.num_kv_heads], dim=1)
        return self.o_proj(self.attn(q, k, v, meta))


class LlamaMLP(nn.Module):
    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        size = shape.intermediate_size
        self.gate_up_proj = MergedLinear(shape.hidden_size, {"gate": size, "up": size}, bias=shape.mlp_bias)
        self.down_proj = Linear(size, shape.hidden_size, bias=shape.mlp_bias)
        # EngineConfig.prefill_ops, set by the model runner: False keeps aten's ops.
        self.fused_ops = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        act = silu_mul(gate_up) if self.fused_ops else None  # one fused pass for bf16 on the CPU, else None
        if act is None:
            gate, up = gate_up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        return self.down_proj(act)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, shape: LlamaShape, variant: LlamaVariant) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = LlamaAttention(shape, variant)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = LlamaMLP(shape)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # The residual add is fused into the next norm; ``hidden`` leaves unsummed.
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, cos, sin, meta)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(self, shape: LlamaShape, variant: LlamaVariant, rope: RopeSpec, max_positions: int) -> None:
        super().__init__()
        self.embed_tokens = VocabEmbedding(shape.vocab_size, shape.hidden_size)
        self.rotary_emb = RotaryEmbedding(rope, max_positions)
        self.layers = nn.ModuleList(LlamaDecoderLayer(shape, variant) for _ in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb.lookup(positions, hidden.dtype)
        residual: torch.Tensor | None = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, cos, sin, meta)
        hidden, _ = self.norm(hidden, residual)
        return hidden


# Checkpoint projections that live inside one fused parameter here: HF name -> (our name, shard).
_PACKED = {
    "q_proj": ("qkv_proj", "q"),
    "k_proj": ("qkv_proj", "k"),
    "v_proj": ("qkv_proj", "v"),
    "gate_proj": ("gate_up_proj", "gate"),
    "up_proj": ("gate_up_proj", "up"),
}


class LlamaForCausalLM(nn.Module):
    """Causal LM over the flattened batch; ``compute_logits`` runs the head on selected rows only."""

    def __init__(self, hf_config: Any, max_positions: int, variant: LlamaVariant | None = None) -> None:
        super().__init__()
        self.shape = LlamaShape.from_hf_config(hf_config)
        self.variant = variant or LlamaVariant()
        rope = RopeSpec.from_hf_config(hf_config, self.shape.head_dim)
        self.model = LlamaModel(self.shape, self.variant, rope, max_positions)
        self.lm_head = LMHead(
            self.shape.vocab_size,
            self.shape.hidden_size,
            tied_to=self.model.embed_tokens if self.shape.tie_word_embeddings else None,
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Final-normed hidden states ``[T, hidden]``."""
        return self.model(input_ids, positions, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def tie_weights(self) -> None:
        """Re-share the embedding with the head (moving off the meta device unties parameters)."""
        if self.lm_head.tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def attention_layers(self) -> list[PagedAttention]:
        return [cast(LlamaDecoderLayer, layer).self_attn.attn for layer in self.model.layers]

    def map_checkpoint_name(self, name: str) -> tuple[str, str | None] | None:
        """Our parameter name and fused shard for a checkpoint tensor; None to skip it."""
        if "rotary_emb.inv_freq" in name:
            return None  # old checkpoints saved the RoPE table; we compute ours
        if name == "lm_head.weight" and self.shape.tie_word_embeddings:
            return None  # some tied checkpoints still ship a copy
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in _PACKED:
            fused, shard = _PACKED[parts[-2]]
            return ".".join([*parts[:-2], fused, parts[-1]]), shard
        return name, None
