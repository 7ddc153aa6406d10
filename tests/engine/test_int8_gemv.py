"""blink::int8_gemv (int8_matmul.h): same result as aten's _weight_int8pack_mm at 1 to MAX_ROWS
rows, ragged row ranges, limits, wired into Int8Linear, and the aten fallback when switched off."""

from __future__ import annotations

import pytest
import torch

from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kernels.int8_gemv import MAX_ROWS, int8_gemv_available
from blink.engine.layers.linear_int8 import Int8Linear, quantize_model

# The kernel is AVX-512 code; every CI and dev machine here has it, so a build failure there is
# a test failure, never a skip.
_HAS_AVX512 = cpu_has_avx512()
needs_avx512 = pytest.mark.skipif(
    not _HAS_AVX512, reason="blink::int8_gemv is AVX-512 code; this CPU has none"
)
# Both kernels accumulate in fp32 and round once to bf16; only the summation order differs, so
# they part by at most about one bf16 step (2^-8 relative) of the output's scale.
_BF16_TOL = 2**-7


def _relative_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-12))


def _operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g)
    s = (torch.rand(n, generator=g) / 50 + 1e-3).to(torch.bfloat16)
    return x, w, s


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@needs_avx512
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 15, 16, 17, 33, MAX_ROWS])
def test_kernel_matches_aten_weight_int8pack_mm(m: int) -> None:
    assert int8_gemv_available()
    # N: 1, odd, and past / not a multiple of every weight-row blocking; K: one 16-vector, a
    # partial 64-chunk, and SmolLM2's hidden and intermediate widths.
    for n in (1, 7, 37, 203):
        for k in (16, 48, 576, 1536):
            x, w, s = _operands(m, n, k, seed=m * 10_000 + n * 10 + k)
            ours = torch.ops.blink.int8_gemv(x, w, s)
            aten = torch.ops.aten._weight_int8pack_mm(x, w, s)
            assert ours.dtype == torch.bfloat16 and ours.shape == (m, n)
            assert _relative_error(ours, aten) < _BF16_TOL, (m, n, k)


@needs_avx512
@pytest.mark.parametrize("m", [1, 3, 4, 16, 17, MAX_ROWS])
def test_rows_computes_exactly_a_ragged_range(m: int) -> None:
    """One ``rows(n0, n1)`` call (int8_gemv_rows, single-threaded, row-strided x and y, unaligned
    scratch) writes the rows of that range, equal to the whole matmul's, and nothing else; the
    parallel wrapper agrees at 1 and 2 threads."""
    assert int8_gemv_available()
    x, w, s = _operands(m, 75, 576, seed=m)
    full = torch.ops.blink.int8_gemv(x, w, s)
    wide = torch.zeros(m, 576 + 32, dtype=torch.bfloat16)
    wide[:, :576] = x
    strided = wide[:, :576]  # ldx = 608
    for n0, n1 in ((0, 75), (0, 1), (3, 10), (5, 70), (17, 18), (61, 75)):
        part = torch.ops.blink.int8_gemv_rows(strided, w, s, n0, n1, 80)
        assert torch.equal(part[:, n0:n1], full[:, n0:n1]), (n0, n1)
        assert part[:, :n0].isnan().all() and part[:, n1:].isnan().all(), (n0, n1)
    torch.set_num_threads(2)
    x, w, s = _operands(m, 3000, 576, seed=m)  # enough rows to split across both threads
    two = torch.ops.blink.int8_gemv(x, w, s)
    torch.set_num_threads(1)
    assert torch.equal(two, torch.ops.blink.int8_gemv(x, w, s))


@needs_avx512
def test_kernel_rejects_what_it_does_not_serve() -> None:
    assert int8_gemv_available()
    x, w, s = _operands(MAX_ROWS + 1, 8, 64, seed=0)
    with pytest.raises(RuntimeError, match=f"serves 1 to {MAX_ROWS} rows, got {MAX_ROWS + 1}"):
        torch.ops.blink.int8_gemv(x, w, s)
    with pytest.raises(RuntimeError, match="K must be a multiple of 16"):
        torch.ops.blink.int8_gemv(x[:1, :40], w[:, :40], s)
    with pytest.raises(RuntimeError, match="x must be bf16"):
        torch.ops.blink.int8_gemv(x[:1].float(), w, s)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        torch.ops.blink.int8_gemv(x[:1], w[:, :48], s)


@needs_avx512
def test_int8_linear_uses_kernel_in_max_rows_chunks(gemv_row_counts: list[int]) -> None:
    torch.manual_seed(0)
    w, b = torch.randn(96, 80), torch.randn(96)
    ours, aten = Int8Linear(w, b, gemv=True), Int8Linear(w, b, gemv=False)
    calls = gemv_row_counts
    for rows in (1, 3, 4, 17, MAX_ROWS, 2 * MAX_ROWS + 5):
        x = torch.randn(rows, 80).to(torch.bfloat16)
        y, ref = ours(x), aten(x)
        assert y.dtype == ref.dtype == torch.bfloat16
        assert _relative_error(y, ref.float()) < 2**-6
    assert calls == [1, 3, 4, 17, MAX_ROWS, MAX_ROWS, MAX_ROWS, 5]


@needs_avx512
def test_compiled_int8_linear_calls_the_kernel() -> None:
    torch.manual_seed(0)
    layer = Int8Linear(torch.randn(40, 64), None, gemv=True)
    x = torch.randn(1, 64).to(torch.bfloat16)
    compiled = torch.compile(layer, backend="inductor", fullgraph=True)
    assert torch.equal(compiled(x), layer(x))


def test_switched_off_falls_back_to_aten() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    model[0].quantizable_linear = True  # type: ignore[assignment]
    assert quantize_model(model, "int8", int8_kernel=False) == 1
    layer = model[0]
    assert isinstance(layer, Int8Linear) and not layer.gemv
    x = torch.randn(1, 64)
    ref = torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), layer.qweight, layer.scales)
    assert torch.equal(layer(x), ref.float() + layer.bias)


@needs_avx512
def test_quantize_model_turns_the_kernel_on_by_default() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    model[0].quantizable_linear = True  # type: ignore[assignment]
    quantize_model(model, "int8")
    assert model[0].gemv
