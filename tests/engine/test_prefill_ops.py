"""The fused bf16 elementwise ops (kernels/prefill_ops.py): RMSNorm with and without the residual
add, and silu(gate) * up, bit-identical to the eager bf16 expressions they replace; the layers
use them for bf16 only; greedy engine output is the same with them on and off (the env switch)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from blink.engine.config import EngineConfig
from blink.engine.kernels import prefill_ops
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.layers.norm import RMSNorm
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams

# AVX-512 code; every CI and dev machine here has it, so a build failure there is a test failure.
pytestmark = pytest.mark.skipif(not cpu_has_avx512(), reason="the prefill ops are AVX-512 code")

GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
EPS = 1e-5


def _eager_norm(
    x: torch.Tensor, residual: torch.Tensor | None, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm.forward's aten path for bf16 (layers/norm.py): (normed, summed)."""
    if residual is not None:
        x = x + residual
    return w * F.rms_norm(x.float(), (x.shape[-1],), None, EPS).to(x.dtype), x


def _bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(torch.bfloat16)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (tells -0 from +0; NaNs equal when their bits are)."""
    return a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.int16), b.contiguous().view(torch.int16)
    )


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    assert prefill_ops.prefill_ops_available()


@pytest.mark.parametrize("rows", [1, 7, 1024])
@pytest.mark.parametrize("width", [64, 72, 576, 1536])
def test_rms_norm_bit_identical_to_eager(rows: int, width: int) -> None:
    torch.manual_seed(rows * 10_000 + width)
    x, residual, w = _bf16(rows, width, scale=3.0), _bf16(rows, width), _bf16(width)
    normed = torch.ops.blink.rms_norm(x, w, EPS)
    assert _bits_equal(normed, _eager_norm(x, None, w)[0])
    normed, summed = torch.ops.blink.add_rms_norm(x, residual, w, EPS)
    expected_normed, expected_summed = _eager_norm(x, residual, w)
    assert _bits_equal(normed, expected_normed)
    assert _bits_equal(summed, expected_summed)


def test_qk_norm_on_a_strided_head_view() -> None:
    """Qwen3 norms q and k heads as [T, heads, head_dim] views of the qkv output (rows strided)."""
    torch.manual_seed(3)
    qkv = _bf16(9, (8 + 2 + 2) * 64, scale=2.0)
    w = _bf16(64)
    for start, heads in ((0, 8), (8 * 64, 2)):
        view = qkv[:, start : start + heads * 64].view(9, heads, 64)
        assert not view.is_contiguous()
        assert _bits_equal(prefill_ops.rms_norm(view, None, w, EPS), _eager_norm(view, None, w)[0])  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [1, 7, 1024])
@pytest.mark.parametrize("inter", [64, 72, 1536])
def test_silu_mul_bit_identical_to_eager(rows: int, inter: int) -> None:
    torch.manual_seed(rows + inter)
    gate_up = _bf16(rows, 2 * inter, scale=4.0)
    gate, up = gate_up.chunk(2, dim=-1)
    assert _bits_equal(torch.ops.blink.silu_mul(gate_up), F.silu(gate) * up)


def test_silu_of_every_bf16_gate_is_atens() -> None:
    """All 65,536 bf16 gates (up = 1, so the output is bf16(silu(gate))): simd_exp.h's exp instead
    of Sleef's changes no bit, signed zeros and NaNs included (0 ulp)."""
    gate = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    gate_up = torch.cat([gate, torch.ones(65536, dtype=torch.bfloat16)]).view(1, -1)
    assert _bits_equal(torch.ops.blink.silu_mul(gate_up)[0], F.silu(gate))


def test_layers_use_the_kernel_for_bf16_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = torch.ops.blink.add_rms_norm

    def counting(*args: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append("add_rms_norm")
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(torch.ops.blink, "add_rms_norm", counting)
    torch.manual_seed(5)
    norm = RMSNorm(576, EPS)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576))
    x, residual = torch.randn(7, 576), torch.randn(7, 576)
    with torch.inference_mode():
        fp32 = norm(x, residual)
        assert calls == []
        norm.to(torch.bfloat16)
        normed, summed = norm(x.bfloat16(), residual.bfloat16())
    assert calls == ["add_rms_norm"]
    expected_normed, expected_summed = _eager_norm(x.bfloat16(), residual.bfloat16(), norm.weight.detach())
    assert _bits_equal(normed, expected_normed) and _bits_equal(summed, expected_summed)
    assert fp32[0].dtype == torch.float32


def test_switched_off_layers_use_aten() -> None:
    x, w = _bf16(3, 64), _bf16(64)
    norm = RMSNorm(64, EPS)
    norm.weight.data.copy_(w)
    norm.fused_ops = False
    assert prefill_ops.rms_norm(x, None, w, EPS) is not None
    assert torch.equal(norm(x), norm._norm(x))


def _prompts(count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(rng.randrange(5, 90))] for _ in range(count)]


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_engine_greedy_identical_with_ops_on_and_off(
    arch: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    path: Path = request.getfixturevalue(arch)
    calls: list[int] = []
    real = torch.ops.blink.silu_mul

    def counting(gate_up: torch.Tensor) -> torch.Tensor:
        calls.append(gate_up.shape[0])
        return real(gate_up)  # type: ignore[no-any-return]

    monkeypatch.setattr(torch.ops.blink, "silu_mul", counting)
    prompts = _prompts(6, seed=11)
    outputs = {}
    for switch in ("on", "aten"):
        monkeypatch.setenv("BLINK_PREFILL_OPS", switch)  # the override (kernels/switches.py)
        cfg = EngineConfig(model=str(path), dtype="bfloat16", threads=1, max_model_len=512)
        outputs[switch] = LLMEngine(cfg, path).generate(prompts, GREEDY)
        if switch == "on":
            assert max(calls) > 1  # prefill rows went through the kernel
            calls.clear()
    assert calls == []
    assert outputs["on"] == outputs["aten"]
    assert all(len(o) == 16 for o in outputs["on"])


@pytest.mark.parametrize(("dtype", "prefill_ops", "built"), [("bfloat16", True, True), ("bfloat16", False, False),
                                                            ("float32", True, False)])
def test_the_runner_builds_the_ops_at_start_not_at_the_first_request(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, prefill_ops: bool, built: bool
) -> None:
    from blink.engine import model_runner

    calls: list[bool] = []
    monkeypatch.setattr(model_runner, "prefill_ops_available", lambda: calls.append(True) or True)
    model_runner.ModelRunner(EngineConfig(model=str(tiny_llama), dtype=dtype, prefill_ops=prefill_ops,  # type: ignore[arg-type]
                                          kv_cache_memory_bytes=1 << 20, threads=1))
    assert bool(calls) == built
