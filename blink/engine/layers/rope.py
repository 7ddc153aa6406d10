"""Rotary position embeddings with the scaling variants used by the Llama/Qwen/Mistral families.

Inverse frequencies follow ``transformers.modeling_rope_utils`` formula for formula so cos/sin match
the reference bit for bit in float32. Supported ``rope_type``s: ``default`` (Llama 2, Llama 3.0,
Mistral, Qwen2/2.5, Qwen3, SmolLM2), ``linear``, ``llama3`` (Llama 3.1/3.2/3.3) and ``yarn``
(Qwen2.5 long-context configs). ``dynamic`` NTK depends on the running sequence length, so it
cannot share one cos/sin table across a batch and is rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from blink.engine.errors import UnsupportedModelError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    """What the rotary table needs from a model config, in one place."""

    head_dim: int
    theta: float
    max_position_embeddings: int
    rope_type: str = "default"
    scaling: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hf_config(cls, config: Any, head_dim: int) -> RopeSpec:
        """Read both the transformers>=5 ``rope_parameters`` and the older ``rope_theta``/``rope_scaling``."""
        params = dict(getattr(config, "rope_parameters", None) or {})
        legacy = getattr(config, "rope_scaling", None) or {}
        for key, value in legacy.items():
            params.setdefault(key, value)
        theta = params.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0
        rope_type = params.get("rope_type") or params.get("type") or "default"
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedModelError("partial rotary embeddings are not supported")
        return cls(
            head_dim=head_dim,
            theta=float(theta),
            max_position_embeddings=int(config.max_position_embeddings),
            rope_type=str(rope_type),
            scaling=params,
        )


def _default_inv_freq(dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def _llama3_inv_freq(spec: RopeSpec) -> torch.Tensor:
    inv_freq = _default_inv_freq(spec.head_dim, spec.theta)
    factor = float(spec.scaling["factor"])
    low_freq_factor = float(spec.scaling["low_freq_factor"])
    high_freq_factor = float(spec.scaling["high_freq_factor"])
    old_context_len = float(spec.scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_inv_freq(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    dim, base, params = spec.head_dim, spec.theta, spec.scaling
    original_max = float(params["original_max_position_embeddings"])
    factor = params.get("factor") or spec.max_position_embeddings / original_max

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original_max / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # the reference's guard against a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, float(attention_factor)


def inverse_frequencies(spec: RopeSpec) -> tuple[torch.Tensor, float]:
    """``(inv_freq [head_dim/2] float32, attention scaling applied to cos/sin)`` for ``spec``."""
    if spec.rope_type == "default":
        return _default_inv_freq(spec.head_dim, spec.theta), 1.0
    if spec.rope_type == "linear":
        return _default_inv_freq(spec.head_dim, spec.theta) / float(spec.scaling["factor"]), 1.0
    if spec.rope_type == "llama3":
        return _llama3_inv_freq(spec), 1.0
    if spec.rope_type == "yarn":
        return _yarn_inv_freq(spec)
    raise UnsupportedModelError(
        f"rope_type {spec.rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
    )


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin for positions ``[0, max_positions)``, looked up once per step.

    The table is a non-persistent buffer so the model can be built on the meta device and the
    table rebuilt by :meth:`reset_buffers` once real storage exists.
    """

    cos_sin: torch.Tensor

    def __init__(self, spec: RopeSpec, max_positions: int) -> None:
        super().__init__()
        self.spec = spec
        self.max_positions = max_positions
        self.register_buffer("cos_sin", torch.empty(0), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        device = self.cos_sin.device
        if device.type == "meta":
            self.cos_sin = torch.empty(self.max_positions, self.spec.head_dim, device=device)
            return
        inv_freq, scaling = inverse_frequencies(self.spec)
        positions = torch.arange(self.max_positions, dtype=torch.int64).float()
        freqs = positions[:, None] * inv_freq[None, :]
        self.cos_sin = torch.cat([freqs.cos() * scaling, freqs.sin() * scaling], dim=-1).to(device)

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` each ``[T, 1, head_dim/2]`` in ``dtype``, broadcastable over heads."""
        cos, sin = self.cos_sin[positions].to(dtype).unsqueeze(1).chunk(2, dim=-1)
        return cos, sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on ``x [T, heads, head_dim]`` (the Hugging Face, non-interleaved layout).

    The eager CPU forward runs blink::rope_write_kv instead where it is built
    (kernels/rope_kv.py); it rounds as these ops do, so both give the same bits.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
