"""Build ``torch.ops.blink.{rms_norm, add_rms_norm, silu_mul}`` (prefill_ops.cpp): one pass each.

In a bf16 prefill aten spends a sizeable share of the time (benchmarks/RESULTS.md, "Figures behind the code's numbers",
prefill_ops) on elementwise work done in several passes: the residual add, an fp32 copy, rms_norm, the cast back
and the weight multiply per norm; silu then a multiply in the MLP. The kernels do each in one
pass over the rows, rounding at eager's points (see prefill_ops.cpp), so a layer calls
:func:`rms_norm` / :func:`silu_mul` here and gets eager's tensor or ``None`` (use eager).

They serve CPU bf16 tensors in eager mode only: fp32 models keep aten's exact path, and a graph
being compiled keeps aten's ops (Inductor fuses those itself). Anything missing (no AVX-512, no
compiler, a failed build, ``prefill_ops: false``) means ``None``: the caller's aten path.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

from blink.engine.kernels.build import build_where_avx512, load_extension

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("prefill_ops.cpp")  # includes rms_norm.h, simd_exp.h


@functools.cache
def _build() -> bool:
    """Compile + load the extension once per process; False (and one log line) on any failure."""
    if not load_extension("blink_prefill_ops", [_SOURCE]):
        return False

    @torch.library.register_fake("blink::rms_norm")
    def _fake_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x.new_empty(x.shape)

    @torch.library.register_fake("blink::add_rms_norm")
    def _fake_add_norm(
        x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape), x.new_empty(x.shape)

    @torch.library.register_fake("blink::silu_mul")
    def _fake_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        return gate_up.new_empty((gate_up.shape[0], gate_up.shape[1] // 2))

    log.info("bf16 RMSNorm and silu * up run as blink::{rms_norm, add_rms_norm, silu_mul} (AVX-512)")
    return True


def prefill_ops_available() -> bool:
    """True when the ops can be used (builds them on the first call)."""
    return _usable_here()


@functools.cache
def _usable_here() -> bool:
    return build_where_avx512("prefill ops", "using aten", _build)


def _serves(x: torch.Tensor, weight: torch.Tensor | None = None) -> bool:
    """CPU bf16 rows in eager inference (the ops have no autograd formula)."""
    return (
        x.dtype == torch.bfloat16
        and x.device.type == "cpu"
        and x.stride(-1) == 1
        and not torch.compiler.is_compiling()
        and not (
            torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
        )
        and prefill_ops_available()
    )


def rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
    """``RMSNorm.forward(x, residual)`` for bf16 rows ([rows, n], or [T, heads, n] without a
    residual), or ``None`` where the kernel does not serve it."""
    if weight.dtype != torch.bfloat16 or not _serves(x, weight):
        return None
    if residual is None:
        if x.dim() not in (2, 3):
            return None
        return torch.ops.blink.rms_norm(x, weight, eps)
    if x.dim() != 2 or residual.shape != x.shape or residual.dtype != x.dtype or residual.stride(-1) != 1:
        return None
    normed, summed = torch.ops.blink.add_rms_norm(x, residual, weight, eps)
    return normed, summed


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """``F.silu(gate) * up`` for bf16 ``[T, 2I]`` rows holding gate then up, or ``None``."""
    if gate_up.dim() != 2 or not _serves(gate_up):
        return None
    out: torch.Tensor = torch.ops.blink.silu_mul(gate_up)
    return out
