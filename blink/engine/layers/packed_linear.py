"""bf16 linear layers on the CPU with the weight pre-packed once into oneDNN's blocked layout.

``F.linear`` hands oneDNN a plain ``[N, K]`` weight, and oneDNN re-blocks it into its GEMM layout
on every call: with weights cold in memory (every decode step streams all of them) that costs
about as much as the GEMM. Packing once at load time (what inductor's freezing does) and calling
``mkldnn._linear_pointwise`` skips it (benchmarks/RESULTS.md, "Prefill / 16 streams: where the
time goes"). Results are bit-identical to ``F.linear``
(checked over all Llama-family shapes used here, M = 1..1024, with and without bias): both run
oneDNN's same brgemm kernel, only the weight's memory layout differs. On CPUs with AMX the same
call picks oneDNN's AMX kernels.

float32 keeps ``F.linear`` (MKL): the fp32 path is the one held bit-exact against ``transformers``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import nn


def cpu_bf16_packing_supported(weight: torch.Tensor) -> bool:
    """Whether ``weight`` can be served from a oneDNN-packed copy on this build and CPU."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.bfloat16
        and weight.dim() == 2
        and torch.backends.mkldnn.is_available()
        and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN-blocked copy of a ``[N, K]`` bf16 weight (an opaque ``torch._mkldnn`` tensor)."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous())


def packed_copy(weight: torch.Tensor) -> torch.Tensor | None:
    """:func:`pack_weight` where packing applies (bf16 on a oneDNN-bf16 CPU), else None."""
    return pack_weight(weight) if cpu_bf16_packing_supported(weight) else None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x W^T (+ b)`` with ``W`` from :func:`pack_weight`; any leading shape of ``x``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@runtime_checkable
class Prepackable(Protocol):
    """A layer that can keep a packed copy of its weight for the eager CPU path."""

    def prepack(self) -> bool: ...


def prepack_model(model: nn.Module) -> int:
    """Pack every layer that offers :meth:`Prepackable.prepack`; returns how many did."""
    return sum(1 for module in model.modules() if isinstance(module, Prepackable) and module.prepack())
