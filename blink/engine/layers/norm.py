"""RMSNorm as the Llama family computes it (in float32, scaled in the activation dtype)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.kernels import prefill_ops


class RMSNorm(nn.Module):
    """Root-mean-square norm; ``forward(x, residual)`` fuses the residual add that precedes it.

    Variance is taken in float32 and the weight is applied after casting back, exactly like
    ``transformers``' ``LlamaRMSNorm``, so bf16 outputs round the same way as the reference.
    ``F.rms_norm`` is one fused kernel instead of five ops (pow, mean, add, rsqrt, mul) and gives
    bit-identical results here (checked for fp32 and bf16 on this CPU). bf16 rows on the CPU go
    through one fused kernel for the add and the norm (kernels/prefill_ops.py, same bits).
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        # EngineConfig.prefill_ops, set by the model runner: False keeps aten's ops.
        self.fused_ops = True
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, shape, self.weight, self.eps)
        return self.weight * F.rms_norm(x.to(torch.float32), shape, None, self.eps).to(x.dtype)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        fused = prefill_ops.rms_norm(x, residual, self.weight, self.eps) if self.fused_ops else None
        if fused is not None:
            return fused
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x
