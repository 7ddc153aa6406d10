"""oneDNN-packed bf16 linears give the same bits as ``F.linear``, so packing never changes outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from blink.engine.config import EngineConfig
from blink.engine.layers.embedding import LMHead
from blink.engine.layers.linear import Linear
from blink.engine.layers.packed_linear import pack_weight, packed_linear, prepack_model
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import ModelRunner
from blink.engine.sampling_params import SamplingParams

torch.set_num_threads(1)

# Packing needs oneDNN bf16 (AVX512-class x86 or Arm SVE); elsewhere layers keep F.linear and
# these tests say so instead of passing vacuously.
needs_onednn_bf16 = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="this CPU/build has no oneDNN bf16 support",
)

# (N, K) of SmolLM2-135M's fused QKV / O / gate-up / down and a tiny odd shape.
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (40, 36)]


@needs_onednn_bf16
@pytest.mark.parametrize(("out_features", "in_features"), SHAPES)
@pytest.mark.parametrize("rows", [1, 3, 16, 33, 257])
def test_packed_linear_is_bit_identical(out_features: int, in_features: int, rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    weight = (torch.randn(out_features, in_features, generator=gen) * 0.2).bfloat16()
    bias = torch.randn(out_features, generator=gen).bfloat16()
    x = torch.randn(rows, in_features, generator=gen).bfloat16()
    packed = pack_weight(weight)
    assert torch.equal(packed_linear(x, packed, None), F.linear(x, weight))
    assert torch.equal(packed_linear(x, packed, bias), F.linear(x, weight, bias))
    # Leading batch dims and a strided view give the rows' 2-D result (F.linear itself rounds a
    # strided 3-D input with bias differently; the model only passes 2-D rows).
    x3 = torch.randn(2, rows, 2 * in_features, generator=gen).bfloat16()[..., ::2]
    rows_2d = F.linear(x3.reshape(-1, in_features), weight, bias).view(2, rows, out_features)
    assert torch.equal(packed_linear(x3, packed, bias), rows_2d)


@needs_onednn_bf16
def test_prepack_only_bf16() -> None:
    fp32 = Linear(16, 8)
    bf16 = Linear(16, 8, bias=True).bfloat16()
    head = LMHead(32, 16).bfloat16()
    for module in (fp32, bf16, head):
        torch.nn.init.normal_(module.weight)
    torch.nn.init.normal_(bf16.bias)  # type: ignore[arg-type]
    x = torch.randn(5, 16).bfloat16()
    before_linear, before_head = bf16(x), head(x)
    assert prepack_model(torch.nn.ModuleList([fp32, bf16, head])) == 2
    assert fp32.packed_weight is None  # fp32 keeps MKL's F.linear (the exact path)
    assert bf16.packed_weight is not None and head.packed_weight is not None
    assert torch.equal(bf16(x), before_linear)
    after_head = head(x)
    assert after_head.dtype == torch.float32
    assert torch.equal(after_head, before_head)


def _unpack(runner: ModelRunner) -> None:
    for module in runner.model.modules():  # type: ignore[attr-defined]
        if getattr(module, "packed_weight", None) is not None:
            module.packed_weight = None


def _greedy(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> dict[str, list[int]]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    out: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
        engine.step()  # staggered: later prompts prefill while earlier ones decode
    while engine.has_unfinished():
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
    return out


@needs_onednn_bf16
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2"])
def test_bf16_engine_identical_with_and_without_packing(arch: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    prompts = [[(7 * i + 3 * j) % 400 + 3 for j in range(5 + 9 * i)] for i in range(4)]
    config = EngineConfig(model=str(path), dtype="bfloat16", threads=1, kv_cache_memory_bytes=1 << 22)
    packed, plain = LLMEngine(config, path), LLMEngine(config, path)
    _unpack(plain.runner)
    assert any(getattr(m, "packed_weight", None) is not None for m in packed.runner.model.modules())  # type: ignore[attr-defined]
    assert _greedy(packed, prompts, 10) == _greedy(plain, prompts, 10)
