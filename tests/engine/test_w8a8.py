"""kernels/w8a8.py: quantize_rows and dequant_rows against fp32 references, Int8Linear's W8A8
path for many-row calls (few rows stay int8 weight-only), the fallbacks, and an int8-w8a8 engine
end to end. The quality guard (top-1 agreement) is in test_linear_int8.py with int8's."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from blink.config.models import EmbeddedModel
from blink.engine.config import EngineConfig
from blink.engine.kernels import w8a8
from blink.engine.kernels.decode_step import fused_decode_available
from blink.engine.kernels.w8a8 import w8a8_available
from blink.engine.layers.linear_int8 import GEMV_DENSE_MAX_ROWS, Int8Linear, quantize_model
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams

needs_kernels = pytest.mark.skipif(not w8a8_available(), reason="needs the W8A8 kernels (AVX-512 + a compiler)")


def _reference_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w8a8.cpp's contract in fp32 aten ops: scale = absmax / 127, q = rne(x * (127 / absmax))."""
    xf = x.float()
    absmax = xf.abs().amax(1).clamp_min(1e-30)
    inv = torch.full_like(absmax, 127.0) / absmax  # a correctly rounded division (127.0 / t is not)
    q = torch.round(xf * inv[:, None]).clamp(-127, 127).to(torch.int8)
    return q, absmax / 127.0


def _reference_dequant(
    acc: torch.Tensor, xs: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None, float_output: bool
) -> torch.Tensor:
    y = acc.float() * ws * xs[:, None]
    if bias is not None:
        y = y + bias.float()
    return y if float_output else y.bfloat16()


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("m", "k"), [(1, 1), (7, 16), (33, 37), (40, 576)])
def test_quantize_rows_round_trip_is_within_half_a_step(dtype: torch.dtype, m: int, k: int) -> None:
    torch.manual_seed(0)
    x = (torch.randn(m, k) * torch.logspace(-3, 2, m)[:, None]).to(dtype)  # rows of very different scale
    if m > 2:
        x[2] = 0  # an all-zero row: codes 0, a positive scale
    q, scales = torch.ops.blink.quantize_rows(x)
    ref_q, ref_scales = _reference_quantize(x)
    assert q.dtype == torch.int8 and scales.dtype == torch.float32
    assert torch.equal(q, ref_q) and torch.equal(scales, ref_scales)
    assert int(q.abs().max()) == 127 and bool((scales > 0).all())
    err = (q.float() * scales[:, None] - x.float()).abs()
    # Half a step per element, up to fp32 rounding of the scale and the product (~1e-7 relative).
    assert bool((err <= scales[:, None] * (0.5 + 1e-5)).all())


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_quantize_rows_scales_columns_before_quantizing(dtype: torch.dtype) -> None:
    """SmoothQuant's 1/s: the rows quantized are ``x * col_scale`` (one fp32 rounding each)."""
    torch.manual_seed(0)
    x = torch.randn(9, 37).to(dtype)
    col = torch.rand(37) * 4 + 0.01
    q, scales = torch.ops.blink.quantize_rows(x, col)
    ref_q, ref_scales = _reference_quantize(x.float() * col)
    assert torch.equal(q, ref_q) and torch.equal(scales, ref_scales)
    for bad in (torch.ones(36), torch.ones(37, dtype=torch.float64), torch.ones(1, 37)):
        with pytest.raises(RuntimeError, match="col_scale"):
            torch.ops.blink.quantize_rows(x, bad)


@needs_kernels
def test_quantize_rows_takes_strided_rows() -> None:
    x = torch.randn(8, 64).bfloat16()[:, :48]
    q, scales = torch.ops.blink.quantize_rows(x)
    ref_q, ref_scales = _reference_quantize(x)
    assert torch.equal(q, ref_q) and torch.equal(scales, ref_scales)


@needs_kernels
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("float_output", [False, True])
def test_dequant_rows_is_exact(bias_dtype: torch.dtype | None, float_output: bool) -> None:
    g = torch.Generator().manual_seed(0)
    acc = torch.randint(-(2**20), 2**20, (19, 37), dtype=torch.int32, generator=g)  # ragged N
    xs, ws = torch.rand(19, generator=g) / 100, torch.rand(37, generator=g) / 100
    bias = None if bias_dtype is None else torch.randn(37, generator=g).to(bias_dtype)
    y = torch.ops.blink.dequant_rows(acc, xs, ws, bias, float_output)
    assert y.dtype == (torch.float32 if float_output else torch.bfloat16)
    assert torch.equal(y, _reference_dequant(acc, xs, ws, bias, float_output))


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_quantize_rows_offset_writes_the_same_codes_plus_128(dtype: torch.dtype) -> None:
    """The uint8 codes oneDNN's int8 matmul takes (zero point 128) are the int8 codes + 128."""
    torch.manual_seed(0)
    x = (torch.randn(13, 37) * 3).to(dtype)
    x[4] = 0
    col = torch.rand(37) * 4 + 0.01
    for col_scale in (None, col):
        q, scales = torch.ops.blink.quantize_rows(x, col_scale)
        qu, scales_u = torch.ops.blink.quantize_rows(x, col_scale, True)
        assert qu.dtype == torch.uint8 and torch.equal(scales_u, scales)
        assert torch.equal(qu.to(torch.int16), q.to(torch.int16) + 128)


@needs_kernels
def test_dequant_rows_of_fp32_sums_equals_dequant_rows_of_the_int32_sums() -> None:
    """oneDNN hands back float(int32 sum): dequantizing it must give the int32 path's bits, also
    past 2^24 where the int32 -> fp32 conversion rounds."""
    g = torch.Generator().manual_seed(0)
    acc = torch.randint(-(2**30), 2**30, (19, 37), dtype=torch.int32, generator=g)
    acc[0, :5] = torch.tensor([2**24 + 1, -(2**24) - 3, 2**25 + 2, 0, -1], dtype=torch.int32)
    xs, ws = torch.rand(19, generator=g) / 100, torch.rand(37, generator=g) / 100
    for bias in (None, torch.randn(37, generator=g), torch.randn(37, generator=g).bfloat16()):
        for float_output in (False, True):
            assert torch.equal(torch.ops.blink.dequant_rows(acc.float(), xs, ws, bias, float_output),
                               torch.ops.blink.dequant_rows(acc, xs, ws, bias, float_output))
    with pytest.raises(RuntimeError, match="int32 or fp32"):
        torch.ops.blink.dequant_rows(acc.double(), xs, ws, None, False)


needs_onednn = pytest.mark.skipif(not w8a8.onednn_w8a8_available(), reason="needs oneDNN's int8 matmul ops")


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("rows", "k", "n"), [(17, 40, 95), (33, 37, 96), (301, 64, 7)])  # odd M, K padded, odd N
@pytest.mark.parametrize("smoothed", [False, True])
def test_onednn_gemm_gives_int_mms_bits(dtype: torch.dtype, rows: int, k: int, n: int, smoothed: bool) -> None:
    """The same layer on oneDNN's int8 matmul and on torch._int_mm: equal bit for bit (both sums
    are exact int32, the dequantization is one), with bias, SmoothQuant's column scales and the
    LM head's fp32 output; within int8 rounding of the fp32 product."""
    torch.manual_seed(rows + k)
    w, b = (torch.randn(n, k) * 0.1).to(dtype), torch.randn(n).to(dtype)
    absmax = torch.rand(k) * 5 + 0.1 if smoothed else None
    x = torch.randn(rows, k).to(dtype)
    for head in (False, True):
        on_int_mm = Int8Linear(w, b, float_output=head, gemv=True, w8a8=True, act_absmax=absmax)
        on_onednn = Int8Linear(w, b, float_output=head, gemv=True, w8a8=True, act_absmax=absmax)
        assert on_onednn.use_onednn_gemm() and on_onednn.w8a8_onednn is not None
        assert on_onednn.w8a8_weight is None and not on_onednn.use_onednn_gemm()  # _int_mm's copy freed
        y = on_onednn(x)
        assert y.dtype == (torch.float32 if head else dtype) and y.shape == (rows, n)
        assert torch.equal(y, on_int_mm(x))
        exact = torch.nn.functional.linear(x.float(), w.float(), b.float())
        assert float((y.float() - exact).norm() / exact.norm()) < 0.03
    # Few rows stay the int8 weight-only path on either GEMM; no W8A8 weight, nothing to pack.
    few = x[:GEMV_DENSE_MAX_ROWS]
    assert torch.equal(on_onednn(few), Int8Linear(w, b, float_output=True, gemv=True)(few))
    assert not Int8Linear(w, b, gemv=True).use_onednn_gemm()


@needs_kernels
def test_onednn_gemm_unavailable_when_its_ops_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose qlinear ops are missing or wrong costs the route, not a request."""
    probe = w8a8.onednn_w8a8_available.__wrapped__  # type: ignore[attr-defined]

    def missing(*args: object) -> torch.Tensor:
        raise RuntimeError("onednn::qlinear_pointwise: no kernel")

    monkeypatch.setattr(w8a8, "_onednn_int32_sums", missing)
    assert not probe()
    monkeypatch.setattr(w8a8, "_onednn_int32_sums", lambda x, w: torch.zeros(x.shape[0], w.zero_points.numel()))
    assert not probe()


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [64, 40])  # 40: the int8 weight is zero-padded to 48 columns
def test_many_row_calls_run_w8a8_and_few_rows_stay_int8(
    dtype: torch.dtype, k: int, gemv_row_counts: list[int], w8a8_rows: list[int]
) -> None:
    """Up to GEMV_DENSE_MAX_ROWS rows: exactly the int8 weight-only layer (blink::int8_gemv, the
    decode path); more rows: quantize_rows + _int_mm + dequant_rows, equal to the references."""
    from blink.engine.layers import linear_int8

    w8a8_calls = w8a8_rows
    torch.manual_seed(0)
    w, b = (torch.randn(96, k) * 0.1).to(dtype), torch.randn(96).to(dtype)
    layer, int8_only = Int8Linear(w, b, gemv=True, w8a8=True), Int8Linear(w, b, gemv=True)
    few = torch.randn(GEMV_DENSE_MAX_ROWS, k).to(dtype)
    assert torch.equal(layer(few), int8_only(few))
    assert w8a8_calls == [] and gemv_row_counts == [GEMV_DENSE_MAX_ROWS] * 2
    many = torch.randn(2, GEMV_DENSE_MAX_ROWS, k).to(dtype)  # 32 rows, leading dims kept
    y = layer(many)
    assert w8a8_calls == [2 * GEMV_DENSE_MAX_ROWS] and len(gemv_row_counts) == 2
    assert y.shape == (2, GEMV_DENSE_MAX_ROWS, 96) and y.dtype == dtype
    xq, xs = _reference_quantize(many.reshape(-1, k))
    _, ws = linear_int8.quantize_per_channel(w)
    acc = torch._int_mm(xq, linear_int8.quantize_per_channel(w)[0].t())
    ref = _reference_dequant(acc, xs, ws, b, dtype == torch.float32).to(dtype)
    assert torch.equal(y.reshape(-1, 96), ref)
    exact = torch.nn.functional.linear(many.float(), w.float(), b.float())
    assert float((y.float() - exact).norm() / exact.norm()) < 0.02  # int8 x int8: ~1% error


@needs_kernels
def test_float_output_layer_returns_fp32_from_bf16_rows() -> None:
    torch.manual_seed(0)
    w = (torch.randn(96, 64) * 0.1).bfloat16()
    head = Int8Linear(w, None, float_output=True, gemv=True, w8a8=True)
    y = head(torch.randn(GEMV_DENSE_MAX_ROWS + 1, 64).bfloat16())
    assert y.dtype == torch.float32 and y.shape == (GEMV_DENSE_MAX_ROWS + 1, 96)


def _model(width: int = 32) -> torch.nn.Module:
    linear = torch.nn.Linear(width, width, bias=False)
    linear.quantizable_linear = True  # type: ignore[assignment]
    return torch.nn.Sequential(linear)


def _mlp(width: int = 32) -> torch.nn.Module:
    """Two projections named as the models name them: one W8A8 keeps, one it leaves dense."""
    mlp = torch.nn.Module()
    for name in ("gate_up_proj", "down_proj"):
        linear = torch.nn.Linear(width, width, bias=False).bfloat16()
        linear.quantizable_linear = True  # type: ignore[assignment]
        setattr(mlp, name, linear)
    model = torch.nn.Module()
    model.mlp = mlp
    return model


@needs_kernels
def test_w8a8_leaves_the_named_projections_on_their_dense_weight(w8a8_rows: list[int]) -> None:
    """int8-w8a8 keeps W8A8_DENSE_KINDS (down_proj) off W8A8: many rows run the dense weight
    exactly as int8-dense-prefill's layer does, up to GEMV_DENSE_MAX_ROWS rows it is int8's layer
    bit for bit; the other projections still run W8A8."""
    from blink.engine.layers import linear_int8
    from blink.engine.layers.packed_linear import prepack_model

    assert linear_int8.W8A8_DENSE_KINDS == ("down_proj",)
    assert linear_int8.w8a8_keeps_dense("model.layers.3.mlp.down_proj")
    assert not linear_int8.w8a8_keeps_dense("model.layers.3.mlp.gate_up_proj")
    assert not linear_int8.w8a8_keeps_dense("model.layers.3.mlp.down_proj_extra")
    models = {}
    for mode in ("int8-w8a8", "int8-dense-prefill", "int8"):
        torch.manual_seed(0)
        models[mode] = _mlp()
        quantize_model(models[mode], mode)
        prepack_model(models[mode])
    mlp = models["int8-w8a8"].mlp
    down, gate_up = mlp.down_proj, mlp.gate_up_proj
    assert down.w8a8_weight is None and down.dense is not None and down.x_col_scale is None
    assert gate_up.w8a8_weight is not None and gate_up.dense is None
    many = torch.randn(GEMV_DENSE_MAX_ROWS + 1, 32).bfloat16()
    assert torch.equal(down(many), models["int8-dense-prefill"].mlp.down_proj(many))
    assert w8a8_rows == []
    gate_up(many)
    assert w8a8_rows == [GEMV_DENSE_MAX_ROWS + 1]
    for rows in (1, 4, GEMV_DENSE_MAX_ROWS):  # 4: dense-prefill's threshold without our kernel
        few = torch.randn(rows, 32).bfloat16()
        assert torch.equal(down(few), models["int8"].mlp.down_proj(few))


def test_switched_off_falls_back_to_int8() -> None:
    """Switched off (as when the build fails), int8-w8a8 is mode int8 at every row count."""
    torch.manual_seed(0)
    model = _model()
    torch.manual_seed(0)
    int8 = _model()
    assert quantize_model(model, "int8-w8a8", w8a8_kernel=False) == 1 and quantize_model(int8, "int8") == 1
    layer = model[0]
    assert isinstance(layer, Int8Linear) and layer.w_scales is None
    x = torch.randn(GEMV_DENSE_MAX_ROWS + 8, 32)
    assert torch.equal(layer(x), int8[0](x))


def test_no_avx512_means_no_w8a8(monkeypatch: pytest.MonkeyPatch) -> None:
    from blink.engine.kernels import build

    monkeypatch.setattr(build, "cpu_has_avx512", lambda: False)
    assert not w8a8_available()


def test_an_int_mm_with_shape_constraints_costs_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert w8a8._int_mm_serves_our_shapes()  # this torch: any shape

    def constrained(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("_int_mm: self.size(0) needs to be greater than 16")

    monkeypatch.setattr(torch, "_int_mm", constrained)
    assert not w8a8._int_mm_serves_our_shapes()


def test_unknown_modes_are_still_rejected() -> None:
    from blink.engine.errors import EngineError

    with pytest.raises(EngineError, match="int8-w8a8"):  # the message lists the new mode too
        quantize_model(_model(), "w8a8")


def _engine(path: Path, quantization: str, **settings: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="bfloat16", quantization=quantization, threads=1, max_model_len=512,
                       **settings)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


@needs_kernels
def test_engine_greedy_run_end_to_end(tiny_llama: Path) -> None:
    """int8-w8a8 keeps the fused decode step (same int8 layers) and its decode rows are int8's:
    a request whose prompt has up to GEMV_DENSE_MAX_ROWS tokens, run alone, gives int8's tokens
    exactly (no call has more rows); longer prompts prefill through W8A8 and still generate."""
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    rng = random.Random(0)
    short = [[rng.randrange(3, 500) for _ in range(rng.randint(3, GEMV_DENSE_MAX_ROWS))] for _ in range(3)]
    long = [[rng.randrange(3, 500) for _ in range(n)] for n in (40, 100)]
    engine, int8 = _engine(tiny_llama, "int8-w8a8"), _engine(tiny_llama, "int8")
    layers = dict(engine.runner.model.named_modules())
    int8_layers = {n: m for n, m in layers.items() if isinstance(m, Int8Linear)}
    # Every projection but down_proj runs W8A8 on many rows; down_proj its dense weight; the LM
    # head stays weight-only int8 (its logits).
    kept_dense = {n for n, m in int8_layers.items() if m.dense is not None}
    assert kept_dense == {n for n in int8_layers if n.endswith(".down_proj")} and kept_dense
    assert all((m.w_scales is None) == (m.float_output or n in kept_dense) for n, m in int8_layers.items())
    assert sum(m.float_output for m in int8_layers.values()) == 1
    assert engine.runner.fused_decode == int8.runner.fused_decode == fused_decode_available()
    for prompt in short:
        assert engine.generate([prompt], params) == int8.generate([prompt], params)
    out = engine.generate(long, params)
    assert [len(o) for o in out] == [12, 12]


@needs_onednn
def test_engine_greedy_output_is_the_same_on_either_w8a8_gemm(tiny_llama: Path) -> None:
    """The GEMM choice changes no token: prompts long enough to prefill through W8A8 give the same
    greedy output on oneDNN's int8 matmul as on torch._int_mm, and the runner reports its choice
    (the choice by CPU class: test_w8a8_gemm_dispatch.py)."""
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 500) for _ in range(n)] for n in (GEMV_DENSE_MAX_ROWS + 1, 77, 150)]
    engines = {gemm: _engine(tiny_llama, "int8-w8a8", w8a8_gemm=gemm) for gemm in ("int_mm", "onednn")}
    assert {g: e.runner.w8a8_gemm for g, e in engines.items()} == {"int_mm": "int_mm", "onednn": "onednn"}
    layers = [m for m in engines["onednn"].runner.model.modules() if isinstance(m, Int8Linear)]
    assert all((m.w8a8_onednn is None) == (m.w_scales is None) and m.w8a8_weight is None for m in layers)
    assert sum(m.w8a8_onednn is not None for m in layers) > 0
    outputs = [e.generate(prompts, params) for e in engines.values()]
    assert outputs[0] == outputs[1] and all(len(o) == 10 for o in outputs[0])


def test_every_engine_mode_is_a_setting_and_travels_to_the_engine_config() -> None:
    from typing import get_args

    from pydantic import ValidationError

    from blink.config.models import EmbeddedModel
    from blink.engine.layers.linear_int8 import QUANTIZATION_MODES

    # Every engine mode is a setting; "auto" is the settings' own, resolved to an engine mode for the CPU.
    assert set(get_args(EmbeddedModel.model_fields["quantization"].annotation)) == {*QUANTIZATION_MODES, "auto"}
    settings = EmbeddedModel(model="m", quantization="int8-w8a8")
    assert _engine_config(settings).quantization == "int8-w8a8"
    assert _engine_config(EmbeddedModel(model="m")).quantization in QUANTIZATION_MODES
    with pytest.raises(ValidationError):
        EmbeddedModel(model="m", quantization="w8a8")  # type: ignore[arg-type]


def _engine_config(ms: EmbeddedModel) -> EngineConfig:
    """What the embedded backend hands the engine for ``ms`` (its "auto" settings resolved)."""
    from blink.backends.embedded import serving_choice

    return serving_choice(ms).apply(ms)
