"""layers/smoothing.py: SmoothQuant factors, the calibration ranges, Int8Linear's smoothed W8A8
path (decode rows untouched, outlier channels no longer flatten a row) and an engine that
calibrates at start. Perplexity on real weights is benchmarks/real_model_quality.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from blink.engine.config import EngineConfig
from blink.engine.kernels.w8a8 import w8a8_available
from blink.engine.layers import linear_int8
from blink.engine.layers.linear import Linear
from blink.engine.layers.linear_int8 import GEMV_DENSE_MAX_ROWS, Int8Linear
from blink.engine.layers.smoothing import calibration_text, recorded_input_ranges, smoothing_factors
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams

needs_kernels = pytest.mark.skipif(not w8a8_available(), reason="needs the W8A8 kernels (AVX-512 + a compiler)")
REPO = Path(__file__).resolve().parents[2]


def test_factors_balance_activation_and_weight_ranges_and_keep_the_product() -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 6)
    act = torch.tensor([1.0, 50.0, 0.5, 2.0, 0.0, 8.0])  # an outlier channel and a silent one
    s = smoothing_factors(act, w, alpha=0.5)
    expected = act.clamp_min(1e-5).sqrt() / w.abs().amax(0).sqrt()
    assert torch.allclose(s, expected) and bool((s > 0).all()) and bool(torch.isfinite(s).all())
    # After smoothing, the ranges of x/s and of W*s's columns are equal (alpha 0.5).
    assert torch.allclose(act[:4] / s[:4], (w * s).abs().amax(0)[:4], rtol=1e-5)
    x = torch.randn(5, 6) * act.clamp_min(0.1)
    assert torch.allclose((x / s) @ (w * s).t(), x @ w.t(), rtol=1e-4, atol=1e-4)
    assert torch.equal(smoothing_factors(act, w, alpha=0.0), 1 / w.abs().amax(0))


def test_ranges_are_the_max_over_every_call_and_the_hooks_go_away() -> None:
    model = nn.Sequential(Linear(3, 2), nn.ReLU(), Linear(2, 1))
    for layer in (model[0], model[2]):
        nn.init.ones_(layer.weight)  # type: ignore[arg-type]
    with recorded_input_ranges(model) as ranges:
        model(torch.tensor([[1.0, -4.0, 0.5]]))
        model(torch.tensor([[-2.0, 1.0, 0.25], [0.0, 3.0, -1.0]]))
    assert torch.equal(ranges["0"], torch.tensor([2.0, 4.0, 1.0]))
    assert set(ranges) == {"0", "2"} and ranges["2"].shape == (2,)
    model(torch.ones(1, 3) * 100)  # after the block: nothing recorded
    assert torch.equal(ranges["0"], torch.tensor([2.0, 4.0, 1.0]))
    assert all(not layer._forward_pre_hooks for layer in model)


def test_the_calibration_text_ships_and_is_not_the_evaluation_text() -> None:
    text = calibration_text()
    assert len(text.split()) > 500
    evaluation = (REPO / "benchmarks" / "data" / "newton_opticks_book1.txt").read_text()
    assert text[:200] not in evaluation and evaluation[:200] not in text


@needs_kernels
@pytest.mark.parametrize("k", [96, 100])  # 100: K padded to a multiple of 16 (padding columns scale 1)
def test_smoothed_w8a8_tames_an_outlier_channel_and_leaves_decode_rows_as_int8(k: int) -> None:
    torch.manual_seed(0)
    w, b = (torch.randn(64, k) * 0.1).bfloat16(), torch.randn(64).bfloat16()
    x = torch.randn(2 * GEMV_DENSE_MAX_ROWS, k)
    x[:, 5] *= 80.0  # one outlier channel, as real down_proj inputs have
    x = x.bfloat16()
    act = x.float().abs().amax(0)
    smooth = Int8Linear(w, b, gemv=True, w8a8=True, act_absmax=act)
    plain, int8_only = Int8Linear(w, b, gemv=True, w8a8=True), Int8Linear(w, b, gemv=True)
    few = x[:GEMV_DENSE_MAX_ROWS]
    assert torch.equal(smooth(few), int8_only(few))  # decode rows: the unsmoothed int8 weights
    assert torch.equal(smooth.qweight, int8_only.qweight)
    exact = nn.functional.linear(x.float(), w.float(), b.float())

    def err(layer: Int8Linear) -> float:
        return float((layer(x).float() - exact).norm() / exact.norm())

    assert err(smooth) < 0.5 * err(plain)
    assert err(smooth) < 0.02
    # The path is exactly: quantize x/s per row, the int8 weight of W*s, dequantize.
    s = smoothing_factors(act, w)
    sq, ss = linear_int8.quantize_per_channel(w.float() * s)
    pad = -k % 16
    col = nn.functional.pad(1 / s, (0, pad), value=1.0)
    xq, xs = torch.ops.blink.quantize_rows(nn.functional.pad(x, (0, pad)), col)
    acc = torch._int_mm(xq, nn.functional.pad(sq, (0, pad)).t())
    assert torch.equal(smooth(x), torch.ops.blink.dequant_rows(acc, xs, ss, b, False))


@needs_kernels
def test_the_engine_calibrates_w8a8_at_start_and_only_w8a8(tiny_llama: Path) -> None:
    def engine(quantization: str, max_model_len: int = 512) -> LLMEngine:
        cfg = EngineConfig(model=str(tiny_llama), dtype="bfloat16", quantization=quantization,  # type: ignore[arg-type]
                           threads=1, max_model_len=max_model_len)
        return LLMEngine(cfg, tiny_llama)

    w8a8, int8 = engine("int8-w8a8"), engine("int8")
    layers = [m for m in w8a8.runner.model.modules() if isinstance(m, Int8Linear)]
    assert w8a8.runner.smoothed_w8a8 and not int8.runner.smoothed_w8a8
    head = [m for m in layers if m.float_output]
    assert len(head) == 1 and head[0].w8a8_weight is None and head[0].x_col_scale is None
    for layer in layers:
        if layer.float_output or layer.dense is not None:  # the head; down_proj (dense prefill)
            assert layer.x_col_scale is None
            continue
        scale = layer.x_col_scale
        assert scale is not None and scale.shape == (layer.in_features + layer._pad,)
        assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
    assert all(m.x_col_scale is None for m in int8.runner.model.modules() if isinstance(m, Int8Linear))
    # A context shorter than the calibration text: calibrated on what fits, and it serves.
    short = engine("int8-w8a8", max_model_len=24)
    assert short.runner.smoothed_w8a8
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    assert [len(o) for o in short.generate([list(range(3, 20))], params)] == [3]


@needs_kernels
@pytest.mark.parametrize("arch", ["tiny_qwen2", "tiny_qwen3"])  # QKV bias; per-head q/k norms
def test_qwen_models_calibrate_and_serve_w8a8_prefills(arch: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(arch)
    cfg = EngineConfig(model=str(path), dtype="bfloat16", quantization="int8-w8a8", threads=1, max_model_len=256)
    engine = LLMEngine(cfg, path)
    assert engine.runner.smoothed_w8a8
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    assert [len(o) for o in engine.generate([list(range(3, 43))], params)] == [3]  # 40 rows: W8A8
