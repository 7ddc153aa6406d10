"""Build and register ``blink::quantize_rows`` and ``blink::dequant_rows``: the passes around
``torch._int_mm`` of a W8A8 (int8 activations x int8 weights) prefill linear.

On a CPU with AVX512-VNNI and no AMX oneDNN's int8 GEMM runs SmolLM2's 1024-row linears faster
than the bf16 one, but quantizing the activations per row and dequantizing the int32 result with
eager aten ops took as long as the GEMM saved (benchmarks/RESULTS.md, "Figures behind the code's numbers", w8a8). ``w8a8.cpp`` does each in one pass over its tensor. ``_int_mm`` has no
shape constraints on the CPU in this torch (any M, K, N, checked down to 1; CUDA's needs M > 16
and K, N multiples of 8), so every many-row call can take this path.

Anything missing (no AVX-512, no compiler, a failed build, ``w8a8_kernel: false``) means
the caller keeps the weight-only int8 path: engine start never fails for want of a compiler.

A second GEMM serves the same linears where the CPU class asks for it (w8a8_gemm_dispatch.py):
oneDNN's int8 matmul primitive through torch's x86 quantization ops (``onednn.qlinear_*``).
``_int_mm`` reaches oneDNN's gemm API, which has no AMX kernel; the matmul primitive runs on the
AMX tiles where the CPU has them (and on VNNI elsewhere, a little slower than ``_int_mm``:
benchmarks/int8_gemm_routes.py). That primitive is fast only for unsigned activations (signed
ones fall to oneDNN's reference kernel, ~1000x slower), so the codes go in as ``q + 128`` with
zero point 128, and unit scales make its fp32 output ``float(int32 sum)``: the dequantization
after it is ``dequant_rows``'s, so both GEMMs give the same bits.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from blink.engine.kernels.build import build_where_avx512, load_extension

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("w8a8.cpp")
# No FMA contraction, so dequant_rows rounds each step as documented (tests compare bit for bit).
_EXTRA_CFLAGS = ["-ffp-contract=off"]


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    if not load_extension("blink_w8a8", [_SOURCE], _EXTRA_CFLAGS):
        return False

    @torch.library.register_fake("blink::quantize_rows")
    def _fake_quantize(
        x: torch.Tensor, col_scale: torch.Tensor | None = None, offset: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        codes = torch.uint8 if offset else torch.int8
        return x.new_empty(x.shape, dtype=codes), x.new_empty((x.shape[0],), dtype=torch.float32)

    @torch.library.register_fake("blink::dequant_rows")
    def _fake_dequant(
        acc: torch.Tensor,
        x_scales: torch.Tensor,
        w_scales: torch.Tensor,
        bias: torch.Tensor | None,
        float_output: bool,
    ) -> torch.Tensor:
        return acc.new_empty(acc.shape, dtype=torch.float32 if float_output else torch.bfloat16)

    if not _int_mm_serves_our_shapes():
        return False
    log.info("int8-w8a8 linears can quantize activations with blink::quantize_rows (AVX-512)")
    return True


def _int_mm_serves_our_shapes() -> bool:
    """One tiny ``_int_mm`` in the form Int8Linear calls it (an odd row count past the decode rows,
    K a multiple of 16 as the weights are padded, an odd N, the weight as a transposed view):
    this torch serves any shape on the CPU, but a build whose ``_int_mm`` adds CUDA-like
    constraints (M > 16, K and N multiples of 8) should cost the mode, not a request."""
    x = torch.ones(17, 48, dtype=torch.int8)
    w = torch.ones(3, 48, dtype=torch.int8)
    try:
        ok = bool((torch._int_mm(x, w.t()) == 48).all())
    except RuntimeError as exc:
        log.warning("torch._int_mm cannot serve int8-w8a8's shapes here (%s); running as int8", exc)
        return False
    if not ok:
        log.warning("torch._int_mm returned wrong sums for int8-w8a8's shapes; running as int8")
    return ok


def w8a8_available() -> bool:
    """True when ``torch.ops.blink.quantize_rows``/``dequant_rows`` can be used (builds them on
    the first call)."""
    return build_where_avx512("W8A8 kernels", "int8-w8a8 runs as int8", _build)


def w8a8_linear(
    x: torch.Tensor,
    qweight_kn: torch.Tensor,
    w_scales: torch.Tensor,
    bias: torch.Tensor | None,
    float_output: bool,
    col_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x [M, K]`` (bf16/fp32) times the int8 weight ``qweight_kn`` (``[K, N]``, any strides
    ``_int_mm`` takes) with fp32 per-output-channel ``w_scales``: ``[M, N]`` bf16 (fp32 when
    ``float_output``). ``col_scale`` (fp32 ``[K]``) multiplies ``x``'s columns before they are
    quantized: SmoothQuant's ``1 / s`` where the weight was smoothed (layers/smoothing.py)."""
    xq, x_scales = torch.ops.blink.quantize_rows(x, col_scale)
    acc = torch._int_mm(xq, qweight_kn)
    return torch.ops.blink.dequant_rows(acc, x_scales, w_scales, bias, float_output)


@dataclass(frozen=True)
class OnednnInt8Weight:
    """An int8 ``[N, K]`` weight packed for oneDNN's int8 matmul, with the unit scales and zero
    points ``qlinear_pointwise`` takes (made once: they are per output channel)."""

    packed: torch.Tensor
    unit_scales: torch.Tensor
    zero_points: torch.Tensor


# oneDNN subtracts this zero point from the uint8 codes quantize_rows(offset=True) writes.
_CODE_OFFSET = 128


def pack_onednn_weight(qweight: torch.Tensor) -> OnednnInt8Weight:
    """``qweight`` (int8 ``[N, K]``) packed for :func:`w8a8_linear_onednn` (a copy: N x K bytes)."""
    n = int(qweight.shape[0])
    packed = torch.ops.onednn.qlinear_prepack(qweight.contiguous(), None)
    return OnednnInt8Weight(packed, torch.ones(n), torch.zeros(n, dtype=torch.long))


def _onednn_int32_sums(xq: torch.Tensor, weight: OnednnInt8Weight) -> torch.Tensor:
    """fp32 ``float(xq @ W^T)`` of uint8 codes ``xq`` (int8 codes + 128) through oneDNN."""
    return torch.ops.onednn.qlinear_pointwise(
        xq, 1.0, _CODE_OFFSET, weight.packed, weight.unit_scales, weight.zero_points, None, 1.0, 0,
        torch.float32, "none", [], "")


@functools.cache
def onednn_w8a8_available() -> bool:
    """Whether oneDNN's int8 matmul can serve W8A8 here: the W8A8 kernels are built, this torch
    has the ops, and they return exact sums on a shape like ours (odd rows, odd N, K padded)."""
    if not w8a8_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-127, 128, (17, 48), dtype=torch.int8, generator=gen)
    w = torch.randint(-127, 128, (5, 48), dtype=torch.int8, generator=gen)
    try:
        got = _onednn_int32_sums(torch.bitwise_xor(x.view(torch.uint8), _CODE_OFFSET), pack_onednn_weight(w))
    except (AttributeError, RuntimeError) as exc:
        log.warning("oneDNN's int8 matmul cannot serve int8-w8a8 here (%s); W8A8 stays on torch._int_mm", exc)
        return False
    ok = bool(torch.equal(got, torch._int_mm(x, w.t()).float()))
    if not ok:
        log.warning("oneDNN's int8 matmul returned wrong sums; W8A8 stays on torch._int_mm")
    return ok


def w8a8_linear_onednn(
    x: torch.Tensor,
    weight: OnednnInt8Weight,
    w_scales: torch.Tensor,
    bias: torch.Tensor | None,
    float_output: bool,
    col_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`w8a8_linear` with the GEMM on oneDNN's int8 matmul primitive: the same result, bit
    for bit (the int32 sums are exact on both; the fp32 conversion and dequantization are one)."""
    xq, x_scales = torch.ops.blink.quantize_rows(x, col_scale, True)
    acc = _onednn_int32_sums(xq, weight)
    return torch.ops.blink.dequant_rows(acc, x_scales, w_scales, bias, float_output)
