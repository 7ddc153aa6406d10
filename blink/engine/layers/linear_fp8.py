"""fp8 (e4m3) linear layers for GPUs with fp8 tensor cores, quantized at load time.

On an Ada (sm_89) or Hopper (sm_90+) GPU an fp8 GEMM runs at twice the bf16 rate and reads half the
weight bytes, which is what decode (bandwidth) and prefill (compute) are bound by. Weights get one
scale per output channel; activations are quantized per token (row) at every call, so no
calibration data is needed (vLLM's "dynamic" fp8 scheme). The GEMM is ``torch._scaled_mm`` with
those row-wise scales where the device takes them, else with one activation scale per call and
the channel scales applied to its float32 output.

There is no CPU mode: torch's CPU ``_scaled_mm`` is slower than the bf16 GEMM it would replace
(benchmarks/RESULTS.md, "Figures behind the code's numbers", linear_fp8), so fp8 on a CPU loses to ``int8``. The tests run the
same layer on the CPU by naming the matmul scheme, since ``_scaled_mm`` computes the same there.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch
from torch import nn

from blink.engine.errors import EngineError

FP8 = torch.float8_e4m3fn
# Largest finite e4m3fn value: the symmetric range every scale maps the absolute maximum onto.
FP8_MAX = float(torch.finfo(FP8).max)
# torch._scaled_mm wants both GEMM widths (K and N) to be multiples of 16 on CUDA.
_WIDTH_MULTIPLE = 16
# fp8 tensor cores start at compute capability 8.9 (Ada); Hopper is 9.0.
_MIN_CAPABILITY = (8, 9)

Scheme = Literal["rowwise", "tensorwise"]


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fp8 [R, K], float32 scales [R, 1])`` with ``x ~= q * scales``, one scale per row."""
    xf = x.to(torch.float32)
    scales = xf.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / FP8_MAX
    q = (xf / scales).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scales


def quantize_fp8_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fp8, float32 scalar scale)``: one scale for the whole tensor."""
    xf = x.to(torch.float32)
    scale = xf.abs().amax().clamp_min(1e-12) / FP8_MAX
    return (xf / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


class Fp8Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` in fp8 (per-channel scales) and ``x`` quantized per call.

    ``scheme`` names how ``_scaled_mm`` takes the scales: ``rowwise`` (one per token and one per
    channel, fused into the GEMM) or ``tensorwise`` (one for the whole activation; the channel
    scales multiply the float32 output). Output in ``x``'s dtype, float32 for ``float_output``.
    """

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, scheme: Scheme,
                 float_output: bool = False) -> None:
        super().__init__()
        self.in_features = int(weight.shape[1])
        self.out_features = int(weight.shape[0])
        self.scheme = scheme
        self.float_output = float_output
        q, scales = quantize_fp8_rows(weight.detach())
        self.register_buffer("qweight", q)
        # [1, N]: the shape _scaled_mm takes for the second operand's row-wise scales.
        self.register_buffer("scales", scales.reshape(1, -1).contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        out_dtype = torch.float32 if self.float_output else x.dtype
        x2 = x.reshape(-1, self.in_features)
        w_t = self.qweight.t()  # column-major, as _scaled_mm wants its second operand
        if self.scheme == "rowwise":
            xq, xs = quantize_fp8_rows(x2)
            y = torch._scaled_mm(xq, w_t, scale_a=xs, scale_b=self.scales, out_dtype=out_dtype)
        else:
            xq, xs = quantize_fp8_tensor(x2)
            one = torch.ones((), dtype=torch.float32, device=x.device)
            y32 = torch._scaled_mm(xq, w_t, scale_a=xs, scale_b=one, out_dtype=torch.float32)
            y = (y32 * self.scales).to(out_dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)


def _probe(scheme: Scheme, device: torch.device) -> bool:
    """Whether ``_scaled_mm`` runs ``scheme`` on ``device`` (a 16x16x16 call)."""
    try:
        layer = Fp8Linear(torch.ones(16, 16, device=device), None, scheme)
        layer(torch.ones(16, 16, device=device, dtype=torch.bfloat16))
    except (RuntimeError, NotImplementedError):
        return False
    return True


@functools.cache
def fp8_scheme(device: torch.device) -> Scheme | None:
    """The fp8 GEMM scheme ``device`` runs, or None where it has no fp8 tensor cores."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    if torch.cuda.get_device_capability(device) < _MIN_CAPABILITY:
        return None
    for scheme in ("rowwise", "tensorwise"):
        if _probe(scheme, device):  # type: ignore[arg-type]
            return scheme  # type: ignore[return-value]
    return None


def fp8_eligible(module: nn.Module) -> bool:
    """Both GEMM widths fit ``_scaled_mm``; other layers keep their loaded dtype."""
    weight: torch.Tensor = module.weight  # type: ignore[assignment]
    return int(weight.shape[0]) % _WIDTH_MULTIPLE == 0 and int(weight.shape[1]) % _WIDTH_MULTIPLE == 0


def quantize_model_fp8(model: nn.Module, scheme: Scheme | None = None) -> int:
    """Swap every eligible ``quantizable_linear`` for an :class:`Fp8Linear`; how many were swapped.

    ``scheme`` defaults to what the model's device runs (:func:`fp8_scheme`); a device without
    fp8 tensor cores is a clear error rather than a slow emulation.
    """
    targets = [(name, m) for name, m in model.named_modules() if getattr(m, "quantizable_linear", False) and name]
    if not targets:
        return 0
    device = targets[0][1].weight.device
    scheme = scheme or fp8_scheme(device)
    if scheme is None:
        raise EngineError(
            f"fp8 weights need a CUDA GPU with fp8 tensor cores (compute capability >= "
            f"{_MIN_CAPABILITY[0]}.{_MIN_CAPABILITY[1]}); the model is on {device}. "
            "On the CPU use quantization 'int8'."
        )
    swapped = 0
    for name, module in targets:
        if not fp8_eligible(module):
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = Fp8Linear(module.weight, getattr(module, "bias", None), scheme,
                          float_output=bool(getattr(module, "float_output", False)))
        setattr(parent, attr, layer.to(device))
        swapped += 1
    return swapped
