"""Build and register ``blink::quantize_rows`` and ``blink::dequant_rows``: the passes around
``torch._int_mm`` of a W8A8 (int8 activations x int8 weights) prefill linear.

On a CPU with AVX512-VNNI and no AMX oneDNN's int8 GEMM runs SmolLM2's 1024-row linears faster
than the bf16 one, but quantizing the activations per row and dequantizing the int32 result with
eager aten ops took as long as the GEMM saved (benchmarks/RESULTS.md, "Figures behind the code's numbers", w8a8). ``w8a8.cpp`` does each in one pass over its tensor. ``_int_mm`` has no
shape constraints on the CPU in this torch (any M, K, N, checked down to 1; CUDA's needs M > 16
and K, N multiples of 8), so every many-row call can take this path.

Anything missing (no AVX-512, no compiler, a failed build, ``w8a8_kernel: false``) means
the caller keeps the weight-only int8 path: engine start never fails for want of a compiler.
"""

from __future__ import annotations

import functools
import logging
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
    def _fake_quantize(x: torch.Tensor, col_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((x.shape[0],), dtype=torch.float32)

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
