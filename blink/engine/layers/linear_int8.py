"""Weight-only int8 linear layers, quantized at load time from a bf16/fp32 checkpoint.

CPU decode is memory-bandwidth bound (every step streams every weight once), so storing weights
in one byte instead of two or four cuts the bytes per step by 2-4x. Weights get one symmetric
scale per output channel (row); activations stay in bf16, so no calibration data is needed.
The matmul is PyTorch's ``_weight_int8pack_mm`` (int8 weights, bf16 activations), faster than a
bf16 or fp32 ``F.linear`` at batch 1 (benchmarks/RESULTS.md, "int8 weights"). At 1-64 rows our own AVX-512
kernel ``blink::int8_gemv`` (kernels/int8_gemv.py) replaces it where it builds: same result up to
fp32 summation order, faster at streaming the weights; at 4-64 rows it runs bf16 dot products
(vdpbf16ps) on the widened int8 weights, ahead of aten's int8 kernel at every row count.
Mode ``int8-w8a8`` also quantizes the activations of many-row (prefill) calls, one scale per row,
and runs oneDNN's int8 GEMM (VNNI) on the same int8 weights: no dense copy (kernels/w8a8.py); on
AMX-INT8 CPUs oneDNN's int8 matmul primitive instead, on a packed copy (w8a8_gemm_dispatch.py).
Given calibrated activation ranges, a layer's W8A8 path is smoothed instead (layers/smoothing.py):
its own int8 copy of the weight with SmoothQuant's per-input-channel factors folded in, the
activations divided by them as they are quantized; the weight-only int8 path is left as it is.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from blink.engine.errors import EngineError
from blink.engine.kernels.int8_gemv import MAX_ROWS as GEMV_MAX_ROWS
from blink.engine.kernels.int8_gemv import int8_gemv_available
from blink.engine.kernels.w8a8 import (
    OnednnInt8Weight,
    pack_onednn_weight,
    w8a8_available,
    w8a8_linear,
    w8a8_linear_onednn,
)
from blink.engine.layers.linear_fp8 import quantize_model_fp8
from blink.engine.layers.packed_linear import packed_copy, packed_linear
from blink.engine.layers.smoothing import DEFAULT_ALPHA, smoothing_factors

log = logging.getLogger(__name__)

# Symmetric int8 range: +-127 keeps zero exact and the range symmetric (-128 is never used).
_INT8_MAX = 127.0
# The CPU kernel reads K in 16-element vectors: other widths returned NaN or crashed (torch
# 2.13), so K is zero-padded to a multiple of 16 (all Llama-family widths already are).
_K_MULTIPLE = 16
# From this many rows on (prefill chunks, batches of 4+ decodes) the oneDNN bf16 GEMM on the
# pre-packed dense weight beats aten's int8-weight kernel, so such calls use the full-precision
# weight when kept (where ours serves a packed layer eagerly: see GEMV_DENSE_MAX_ROWS). The
# crossover is between 2 and 4 rows (benchmarks/RESULTS.md, "Figures behind the code's numbers", linear_int8).
DENSE_MIN_ROWS = 4
# Where blink::int8_gemv is built (it serves 1-GEMV_MAX_ROWS rows, instead of aten's int8 kernel at
# every row count), calls of up to this many rows use it even when the pre-packed bf16 weight is
# kept. Both are vdpbf16ps-bound from ~32 rows (ours also widens the int8), so the crossover sits
# between 16 and 32 (benchmarks/int8_gemv.py; RESULTS.md, "Figures behind the code's numbers", linear_int8).
GEMV_DENSE_MAX_ROWS = 16
# "int8": int8 weights only; "int8-dense-prefill": also keeps the loaded weights for prefill;
# "int8-w8a8": int8 weights only, calls of more than GEMV_DENSE_MAX_ROWS rows quantize their
# activations per row and run oneDNN's int8 GEMM (kernels/w8a8.py), but for W8A8_DENSE_KINDS,
# which also keep their dense weight for those calls; fewer rows run as in "int8".
QUANTIZATION_MODES = ("none", "int8", "int8-dense-prefill", "int8-w8a8", "fp8")
# Projections (by the last part of their module name) that "int8-w8a8" leaves off W8A8: their
# many-row calls run the dense bf16 weight, as "int8-dense-prefill" does. down_proj's input has
# real models' worst activation outliers (layers/smoothing.py); on W8A8 it cost SmolLM2 most of
# the mode's perplexity loss and answers (benchmarks/RESULTS.md, "W8A8 with down_proj dense").
# () restores the every-projection W8A8 of before (benchmarks/real_model_defaults.py times both).
W8A8_DENSE_KINDS: tuple[str, ...] = ("down_proj",)


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(int8 [N, K], float32 scales [N])`` with ``weight ~= q * scales[:, None]``."""
    w = weight.detach().to(torch.float32)
    scales = w.abs().amax(dim=1).clamp_min(1e-12) / _INT8_MAX
    q = torch.round(w / scales[:, None]).clamp_(-_INT8_MAX, _INT8_MAX).to(torch.int8)
    return q.contiguous(), scales


class Int8Linear(nn.Module):
    """``y = x (q * s)^T + b`` with int8 ``q`` and per-row scale ``s``; output in ``x``'s dtype
    (float32 when ``float_output``, as the LM head must return)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        float_output: bool = False,
        keep_dense: bool = False,
        gemv: bool = False,
        w8a8: bool = False,
        act_absmax: torch.Tensor | None = None,
        alpha: float = DEFAULT_ALPHA,
        dense_past_gemv: bool = False,
    ) -> None:
        super().__init__()
        # "int8-w8a8"'s projections kept off W8A8 (W8A8_DENSE_KINDS): their dense weight serves
        # only the calls W8A8 would have served (more than GEMV_DENSE_MAX_ROWS rows), so calls of
        # fewer rows stay int8's bit for bit on every CPU, as the mode promises.
        self.dense_past_gemv = dense_past_gemv
        # Eager calls use blink::int8_gemv (the caller checked it is built).
        self.gemv = gemv
        # Full-precision weight for many-row calls (see DENSE_MIN_ROWS); costs its memory.
        self.dense = weight.detach() if keep_dense else None
        q, scales = quantize_per_channel(weight)
        self.in_features = int(weight.shape[1])
        self.out_features = int(weight.shape[0])
        self._pad = -self.in_features % _K_MULTIPLE
        if self._pad:
            q = torch.nn.functional.pad(q, (0, self._pad))
        self.float_output = float_output
        self.register_buffer("qweight", q)
        # The kernel wants the scales in the activation dtype; bf16 is what the matmul runs in.
        self.register_buffer("scales", scales.to(torch.bfloat16))
        # Set when eager calls of more than GEMV_DENSE_MAX_ROWS rows run W8A8 (the caller checked
        # that kernels/w8a8.py is built): ``qweight`` as the [K, N] operand _int_mm takes (a view,
        # no copy) and the fp32 scales, so the dequantization does not round them to bf16.
        self.w8a8_weight: torch.Tensor | None = q.t() if w8a8 else None
        self.w_scales: torch.Tensor | None = scales if w8a8 else None
        # With calibrated input ranges (``act_absmax``, per input channel), the W8A8 path is
        # SmoothQuant's: its own int8 weight ``W * s`` and the activations times ``1 / s``
        # (padding columns times 1), applied by blink::quantize_rows as it quantizes them.
        self.x_col_scale: torch.Tensor | None = None
        if w8a8 and act_absmax is not None:
            smooth = smoothing_factors(act_absmax, weight, alpha)
            sq, sscales = quantize_per_channel(weight.detach().to(torch.float32) * smooth)
            if self._pad:
                sq = torch.nn.functional.pad(sq, (0, self._pad))
            self.w8a8_weight, self.w_scales = sq.t(), sscales
            self.x_col_scale = torch.nn.functional.pad(smooth.reciprocal(), (0, self._pad), value=1.0)
        # Set by ``use_onednn_gemm`` where the CPU class runs W8A8 on oneDNN's int8 matmul
        # (w8a8_gemm_dispatch.py): the W8A8 weight packed for it, in place of ``w8a8_weight``.
        # A layer runs W8A8 when it has ``w_scales``: on this weight if set, else on _int_mm's.
        self.w8a8_onednn: OnednnInt8Weight | None = None
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        # oneDNN-packed copy of ``dense`` (packed_linear.py), set by ``prepack``.
        self.packed_dense: torch.Tensor | None = None
        # Set by the model runner from the CPU class (decode_gemm_dispatch.py): calls of at least
        # this many rows take the GEMM weight (dense or W8A8) even below the thresholds here.
        self.gemm_min_rows: int | None = None

    @property
    def has_gemm_weight(self) -> bool:
        """Whether many-row calls have a oneDNN GEMM to go to (the dense or the W8A8 weight)."""
        return self.dense is not None or self.w_scales is not None

    def prepack(self) -> bool:
        """Pack the kept dense weight for the many-row calls; False without one (or off bf16 CPU)."""
        self.packed_dense = None if self.dense is None else packed_copy(self.dense)
        return self.packed_dense is not None

    def use_onednn_gemm(self) -> bool:
        """Run the W8A8 GEMM on oneDNN's int8 matmul (the caller checked
        kernels/w8a8.onednn_w8a8_available); False, and nothing changes, without a W8A8 weight."""
        if self.w8a8_weight is None:
            return False
        self.w8a8_onednn = pack_onednn_weight(self.w8a8_weight.t())
        # _int_mm's operand is no longer read: dropping it frees the smoothed copy (an unsmoothed
        # one is a view of ``qweight``, which the few-row calls keep using).
        self.w8a8_weight = None
        return True

    def _dense_min_rows(self) -> int:
        """Fewest rows served by the kept dense weight: past our kernel's crossover against the
        packed bf16 GEMM where both exist, else DENSE_MIN_ROWS (aten's int8 kernel, or an unpacked
        dense weight such as fp32's, which stays the exact prefill path)."""
        if self.dense_past_gemv or (self.gemv and self.packed_dense is not None and not torch.compiler.is_compiling()):
            return self._gemm_rows(GEMV_DENSE_MAX_ROWS + 1)
        return DENSE_MIN_ROWS

    def _gemm_rows(self, default: int) -> int:
        """``default``, or fewer where the CPU class moves the GEMM crossover down (AMX)."""
        return default if self.gemm_min_rows is None else min(default, self.gemm_min_rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        rows = x.numel() // self.in_features
        w_scales = self.w_scales
        if w_scales is not None and rows >= self._gemm_rows(GEMV_DENSE_MAX_ROWS + 1):
            if not torch.compiler.is_compiling():
                return self._w8a8_forward(x, w_scales).reshape(*lead, self.out_features)
        if self.dense is not None and rows >= self._dense_min_rows():
            if not torch.compiler.is_compiling() and self.packed_dense is not None:
                y = packed_linear(x, self.packed_dense, self.bias)
            else:
                y = torch.nn.functional.linear(x, self.dense, self.bias)
            return y.float() if self.float_output else y
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if self._pad:
            x2 = torch.nn.functional.pad(x2, (0, self._pad))
        if self.gemv and not torch.compiler.is_compiling():
            # Eager: our kernel at any row count, GEMV_MAX_ROWS rows per call (an int8-only
            # prefill): it beats aten's at every size measured (2.4-3.1x at 64 rows).
            chunks = [torch.ops.blink.int8_gemv(c, self.qweight, self.scales) for c in x2.split(GEMV_MAX_ROWS)]
            y = chunks[0] if len(chunks) == 1 else torch.cat(chunks)
        elif self.gemv and rows < DENSE_MIN_ROWS:
            # Inside torch.compile graphs (the decode graph serves < DENSE_MIN_ROWS rows) many-row
            # calls stay aten's, which inductor's freezing may lower to its own int8 GEMM.
            y = torch.ops.blink.int8_gemv(x2, self.qweight, self.scales)
        else:
            y = torch.ops.aten._weight_int8pack_mm(x2, self.qweight, self.scales)
        y = y.to(torch.float32 if self.float_output else x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def _w8a8_forward(self, x: torch.Tensor, w_scales: torch.Tensor) -> torch.Tensor:
        """``[rows, out_features]`` through kernels/w8a8.py: bf16 activations quantize from bf16,
        any other dtype from fp32, and the output is fp32 unless it is bf16 that was asked for."""
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype not in (torch.bfloat16, torch.float32):
            x2 = x2.float()
        if self._pad:
            x2 = torch.nn.functional.pad(x2, (0, self._pad))
        fp32_out = self.float_output or x.dtype != torch.bfloat16
        bias: torch.Tensor | None = self.bias
        if bias is not None and bias.dtype not in (torch.bfloat16, torch.float32):
            bias = bias.float()
        onednn, weight = self.w8a8_onednn, self.w8a8_weight
        if onednn is not None:
            y = w8a8_linear_onednn(x2, onednn, w_scales, bias, fp32_out, self.x_col_scale)
        elif weight is not None:
            y = w8a8_linear(x2, weight, w_scales, bias, fp32_out, self.x_col_scale)
        else:  # w_scales without either weight: a construction bug, not a request's fault
            raise EngineError("W8A8 layer has scales but no weight")
        return y if self.float_output else y.to(x.dtype)


def w8a8_keeps_dense(name: str) -> bool:
    """Whether "int8-w8a8" runs the many-row calls of the linear named ``name`` on its dense
    weight rather than on W8A8 (W8A8_DENSE_KINDS)."""
    return name.rpartition(".")[2] in W8A8_DENSE_KINDS


def quantize_model(
    model: nn.Module, mode: str, input_ranges: dict[str, torch.Tensor] | None = None, *,
    int8_kernel: bool = True, w8a8_kernel: bool = True,
) -> int:
    """Swap every module that declares ``quantizable_linear`` for an :class:`Int8Linear`.

    Returns how many were replaced. ``"none"`` leaves the model as loaded. A tied LM head gets
    its own int8 copy while the embedding lookup keeps the full-precision table. On CPU the
    decode-row kernel is built here (engine start, before warm-up) when the machine supports it.
    ``input_ranges`` (module name -> per-input-channel ``max |x|`` from a calibration forward,
    layers/smoothing.py) smooths the W8A8 path of the layers it names; other modes ignore it,
    since only W8A8 quantizes activations. ``int8_kernel`` / ``w8a8_kernel`` (EngineConfig's fields)
    turn Blink's kernels off where they would otherwise be used.
    """
    if mode not in QUANTIZATION_MODES:
        raise EngineError(f"unknown quantization {mode!r}; expected one of {', '.join(QUANTIZATION_MODES)}")
    if mode == "none":
        return 0
    if mode == "fp8":  # CUDA GPUs with fp8 tensor cores only (linear_fp8.py)
        return quantize_model_fp8(model)
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if getattr(module, "quantizable_linear", False) and name
    ]
    cpu = bool(targets) and targets[0][1].weight.device.type == "cpu"  # type: ignore[union-attr]
    gemv = cpu and int8_kernel and int8_gemv_available()
    # Without the W8A8 kernels (or off the CPU) "int8-w8a8" runs exactly as "int8".
    w8a8 = mode == "int8-w8a8" and cpu and w8a8_kernel and w8a8_available()
    if mode == "int8-w8a8" and not w8a8:
        log.warning("int8-w8a8: W8A8 kernels unavailable here; many-row calls use the int8 weight-only path")
    for name, module in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        weight = module.weight  # type: ignore[union-attr]
        bias = getattr(module, "bias", None)
        # The LM head stays weight-only int8 at every row count: its activation rounding lands
        # unaveraged on every logit (it was most of W8A8's perplexity loss on real weights:
        # benchmarks/RESULTS.md, "W8A8 with SmoothQuant"), and serving runs it on a few rows
        # per sequence anyway (the last position, or 1 + K verified tokens), where W8A8 never
        # applies; only long prompt-logprob requests would have taken its W8A8 path.
        head = bool(getattr(module, "float_output", False))
        dense_prefill = w8a8 and w8a8_keeps_dense(name)
        on_w8a8 = w8a8 and not head and not dense_prefill
        replacement = Int8Linear(
            weight,
            bias,
            float_output=head,
            keep_dense=mode == "int8-dense-prefill" or dense_prefill,
            gemv=gemv,
            w8a8=on_w8a8,
            act_absmax=(input_ranges or {}).get(name) if on_w8a8 else None,
            dense_past_gemv=dense_prefill,
        )
        setattr(parent, attr, replacement.to(weight.device))  # type: ignore[union-attr]
    return len(targets)
