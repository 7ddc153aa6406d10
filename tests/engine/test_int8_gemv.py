"""blink::int8_gemv: same result as aten's _weight_int8pack_mm, wired into Int8Linear, and the
aten fallback when the kernel is switched off."""

from __future__ import annotations

import pytest
import torch

from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kernels.int8_gemv import ENV_SWITCH, MAX_ROWS, int8_gemv_available
from blink.engine.layers.linear_int8 import Int8Linear, quantize_model

# The kernel is AVX-512 code; every CI and dev machine here has it, so a build failure there is
# a test failure, never a skip.
_HAS_AVX512 = cpu_has_avx512()
needs_avx512 = pytest.mark.skipif(
    not _HAS_AVX512, reason="blink::int8_gemv is AVX-512 code; this CPU has none"
)


def _relative_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-12))


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 37, 64, 100, 577, 1536])
def test_kernel_matches_float64_reference_on_odd_shapes(dtype: torch.dtype, k: int) -> None:
    assert int8_gemv_available()
    g = torch.Generator().manual_seed(k)
    for m in range(1, MAX_ROWS + 1):
        for n in (1, 7, 9, 203):  # below, at and past the 8- and 4-row blocks, odd
            x = torch.randn(m, k, generator=g).to(dtype)
            w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
            s = (torch.rand(n, generator=g) / 50).to(dtype)
            y = torch.ops.blink.int8_gemv(x, w, s)
            assert y.dtype == dtype and y.shape == (m, n)
            ref = (x.double() @ w.double().t()) * s.double()
            # fp32 accumulation (K <= 1536 terms) then one rounding to the output dtype.
            assert _relative_error(y, ref) < (1e-2 if dtype == torch.bfloat16 else 1e-5), (m, n, k)


@needs_avx512
@pytest.mark.parametrize("m", range(1, MAX_ROWS + 1))
def test_kernel_matches_aten_weight_int8pack_mm(m: int) -> None:
    assert int8_gemv_available()
    g = torch.Generator().manual_seed(m)
    for n, k in ((576, 576), (193, 1536), (49, 80)):  # aten's kernel wants K % 16 == 0
        x = torch.randn(m, k, generator=g).to(torch.bfloat16)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
        s = (torch.rand(n, generator=g) / 50).to(torch.bfloat16)
        ours = torch.ops.blink.int8_gemv(x, w, s)
        aten = torch.ops.aten._weight_int8pack_mm(x, w, s)
        # Both accumulate in fp32 and round once to bf16; only the summation order differs, so
        # they part by at most about one bf16 step (2^-8 relative) of the output's scale.
        assert _relative_error(ours, aten.float()) < 2**-7


@needs_avx512
def test_int8_linear_uses_kernel_for_decode_rows_and_aten_beyond(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    w, b = torch.randn(96, 80), torch.randn(96)
    ours, aten = Int8Linear(w, b, gemv=True), Int8Linear(w, b, gemv=False)
    calls: list[int] = []
    real = torch.ops.blink.int8_gemv

    def counting(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return real(x, q, s)

    monkeypatch.setattr(torch.ops.blink, "int8_gemv", counting)
    for rows in (1, 2, 3, 4, 7):
        x = torch.randn(rows, 80).to(torch.bfloat16)
        y, ref = ours(x), aten(x)
        assert y.dtype == ref.dtype == torch.bfloat16
        assert _relative_error(y, ref.float()) < 2**-6
    assert calls == [1, 2, 3]  # 4+ rows keep aten's kernel


@needs_avx512
def test_compiled_int8_linear_calls_the_kernel() -> None:
    torch.manual_seed(0)
    layer = Int8Linear(torch.randn(40, 64), None, gemv=True)
    x = torch.randn(1, 64).to(torch.bfloat16)
    compiled = torch.compile(layer, backend="inductor", fullgraph=True)
    assert torch.equal(compiled(x), layer(x))


def test_env_switch_falls_back_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SWITCH, "aten")
    assert not int8_gemv_available()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    model[0].quantizable_linear = True  # type: ignore[assignment]
    assert quantize_model(model, "int8") == 1
    layer = model[0]
    assert isinstance(layer, Int8Linear) and not layer.gemv
    x = torch.randn(1, 64)
    ref = torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), layer.qweight, layer.scales)
    assert torch.equal(layer(x), ref.float() + layer.bias)


@needs_avx512
def test_quantize_model_turns_the_kernel_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SWITCH, raising=False)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    model[0].quantizable_linear = True  # type: ignore[assignment]
    quantize_model(model, "int8")
    assert model[0].gemv
