"""Layer-level checks against transformers' reference code and naive attention."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from blink.engine.errors import UnsupportedModelError
from blink.engine.layers.attention import AttentionMetadata, PagedAttention, PrefillChunk
from blink.engine.layers.linear import MergedLinear
from blink.engine.layers.norm import RMSNorm
from blink.engine.layers.rope import RopeSpec, RotaryEmbedding, apply_rotary, inverse_frequencies

torch.set_num_threads(1)

# Real-world rope settings: Llama 3.2 (llama3), Qwen2.5 long-context (yarn), plain Llama 2 / SmolLM2.
ROPE_CONFIGS = {
    "default": ({"rope_theta": 100000.0}, None),
    "linear": ({"rope_theta": 10000.0}, {"rope_type": "linear", "factor": 4.0}),
    "llama3": (
        {"rope_theta": 500000.0, "max_position_embeddings": 131072},
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    "yarn": (
        {"rope_theta": 1000000.0, "max_position_embeddings": 131072},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_reference(dtype: torch.dtype) -> None:
    x = torch.randn(5, 64, dtype=dtype) * 3
    residual = torch.randn(5, 64, dtype=dtype)
    ours, ref = RMSNorm(64, 1e-6).to(dtype), LlamaRMSNorm(64, 1e-6).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(64))
        ref.weight.copy_(ours.weight)
        assert torch.equal(ours(x), ref(x))
        normed, summed = ours(x, residual)
        assert torch.equal(summed, x + residual)
        assert torch.equal(normed, ref(x + residual))


@pytest.mark.parametrize("name", sorted(ROPE_CONFIGS))
def test_inverse_frequencies_match_transformers(name: str) -> None:
    base, scaling = ROPE_CONFIGS[name]
    hf = AutoConfig.for_model(
        "llama",
        hidden_size=2048,
        num_attention_heads=32,
        **base,
        **({"rope_scaling": scaling} if scaling else {}),
    )
    spec = RopeSpec.from_hf_config(hf, head_dim=64)
    assert spec.rope_type == name
    ours, ours_scale = inverse_frequencies(spec)
    ref, ref_scale = ROPE_INIT_FUNCTIONS[name](hf, "cpu") if name != "default" else (None, 1.0)
    if ref is None:
        ref = 1.0 / (base["rope_theta"] ** (torch.arange(0, 64, 2, dtype=torch.float) / 64))
    assert torch.equal(ours, ref)
    assert ours_scale == pytest.approx(ref_scale)


def test_legacy_config_fields_are_read() -> None:
    """Checkpoints written before transformers 5 keep ``rope_theta``/``rope_scaling`` at top level."""
    legacy = SimpleNamespace(
        rope_theta=500000.0,
        rope_scaling={"type": "linear", "factor": 2.0},
        max_position_embeddings=4096,
    )
    spec = RopeSpec.from_hf_config(legacy, head_dim=16)
    assert (spec.theta, spec.rope_type) == (500000.0, "linear")
    with pytest.raises(UnsupportedModelError, match="longrope"):
        inverse_frequencies(RopeSpec(16, 1e4, 4096, "longrope"))


def test_rotary_matches_transformers() -> None:
    spec = RopeSpec(head_dim=32, theta=10000.0, max_position_embeddings=512)
    rope = RotaryEmbedding(spec, 512)
    positions = torch.tensor([0, 1, 7, 300, 511])
    q, k = torch.randn(5, 4, 32), torch.randn(5, 2, 32)
    cos, sin = rope.lookup(positions, torch.float32)
    inv_freq, _ = inverse_frequencies(spec)
    freqs = positions[:, None].float() * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    ref_q, ref_k = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], emb.cos()[None], emb.sin()[None]
    )
    torch.testing.assert_close(apply_rotary(q, cos, sin), ref_q[0].transpose(0, 1), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(apply_rotary(k, cos, sin), ref_k[0].transpose(0, 1), atol=1e-6, rtol=1e-6)


def test_merged_linear_loads_shards() -> None:
    layer = MergedLinear(8, {"q": 4, "k": 2, "v": 2}, bias=True)
    parts = {name: torch.randn(size, 8) for name, size in layer.shard_sizes.items()}
    for name, weight in parts.items():
        layer.load_shard(layer.weight, weight, name)
        layer.load_shard(layer.bias, torch.full((layer.shard_sizes[name],), 1.0), name)  # type: ignore[arg-type]
    x = torch.randn(3, 8)
    q, k, v = layer(x).split([4, 2, 2], dim=-1)
    torch.testing.assert_close(q, x @ parts["q"].T + 1)
    torch.testing.assert_close(v, x @ parts["v"].T + 1)
    with pytest.raises(ValueError, match="shape mismatch"):
        layer.load_shard(layer.weight, torch.randn(3, 8), "k")


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int) -> torch.Tensor:
    """Causal attention of ``q [n, H, D]`` (positions ``offset..``) over ``k/v [L, KVH, D]``."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q, k) / math.sqrt(q.shape[-1])
    allowed = torch.arange(k.shape[0])[None, :] <= (offset + torch.arange(q.shape[0]))[:, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnl,lhd->nhd", scores.softmax(-1), v).reshape(q.shape[0], -1)


def test_paged_attention_mixed_batch_matches_naive() -> None:
    """Two decodes and two prefill chunks (one fresh, one on top of cached context) in one call."""
    heads, kv_heads, dim, bs = 4, 2, 8, 4
    attn = PagedAttention(heads, kv_heads, dim, dim**-0.5)
    attn.k_cache = torch.zeros(32, bs, kv_heads, dim)
    attn.v_cache = torch.zeros(32, bs, kv_heads, dim)
    gen = torch.Generator().manual_seed(0)
    # (context already cached, new tokens, block table): scattered, non-monotonic blocks.
    layout = [(9, 1, [5, 30, 2]), (3, 1, [17]), (0, 6, [8, 1]), (5, 7, [3, 22, 11])]
    full_k, full_v, queries, slots = [], [], [], []
    for ctx, n, table in layout:
        k = torch.randn(ctx + n, kv_heads, dim, generator=gen)
        v = torch.randn(ctx + n, kv_heads, dim, generator=gen)
        full_k.append(k)
        full_v.append(v)
        queries.append(torch.randn(n, heads, dim, generator=gen))
        pos_slots = [table[p // bs] * bs + p % bs for p in range(ctx + n)]
        attn.k_cache.view(-1, kv_heads, dim)[pos_slots[:ctx]] = k[:ctx]
        attn.v_cache.view(-1, kv_heads, dim)[pos_slots[:ctx]] = v[:ctx]
        slots.append(pos_slots[ctx:])

    meta = AttentionMetadata(
        slot_mapping=torch.tensor([s for group in slots for s in group]),
        num_decode=2,
        decode_block_tables=torch.tensor([[5, 30, 2], [17, 0, 0]]),
        decode_mask=(torch.arange(12)[None, :] <= torch.tensor([9, 3])[:, None])[:, None, None, :],
        prefills=[
            PrefillChunk(start=2, end=8, context_len=0),
            PrefillChunk(
                start=8,
                end=15,
                context_len=5,
                block_table=torch.tensor([3, 22, 11]),
                mask=torch.arange(12)[None, :] <= torch.arange(5, 12)[:, None],
            ),
        ],
    )
    q = torch.cat(queries)
    k_new = torch.cat([k[ctx:] for k, (ctx, _, _) in zip(full_k, layout, strict=True)])
    v_new = torch.cat([v[ctx:] for v, (ctx, _, _) in zip(full_v, layout, strict=True)])
    out = attn(q, k_new, v_new, meta)
    expected = torch.cat(
        [naive_attention(queries[i], full_k[i], full_v[i], layout[i][0]) for i in range(len(layout))]
    )
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
