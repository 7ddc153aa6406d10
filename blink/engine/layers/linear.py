"""Linear layers, including the fused projections that cut per-step kernel launches.

Decode on the CPU is bound by per-op overhead as much as by bandwidth, so Q/K/V and gate/up are
each one matmul. Checkpoints store them separately; ``load_shard`` copies a checkpoint tensor into
its rows of the fused weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.layers.packed_linear import packed_copy, packed_linear


class Linear(nn.Module):
    """``y = x W^T (+ b)``; ``load_shard`` with ``shard=None`` copies the whole tensor."""

    # Marks layers that load-time int8 quantization may replace (linear_int8.quantize_model).
    quantizable_linear = True

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        # oneDNN-packed copy of ``weight`` for the eager bf16 CPU path (see packed_linear.py);
        # a plain attribute, so it is neither saved nor traced. ``weight`` stays for loading,
        # quantization and the compiled decode graph.
        self.packed_weight: torch.Tensor | None = None

    def prepack(self) -> bool:
        """Pack the loaded weight once; False where packing does not apply (fp32, non-CPU)."""
        self.packed_weight = packed_copy(self.weight)
        return self.packed_weight is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Checked first: under torch.compile the packed tensor must never be touched.
        if not torch.compiler.is_compiling() and self.packed_weight is not None:
            return packed_linear(x, self.packed_weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def shard_rows(self, shard: str | int | None) -> slice:
        """Rows of the weight a checkpoint tensor named by ``shard`` fills."""
        return slice(0, self.out_features)

    def load_shard(self, param: nn.Parameter, loaded: torch.Tensor, shard: str | int | None) -> None:
        target = param.data[self.shard_rows(shard)]
        if target.shape != loaded.shape:
            raise ValueError(
                f"shape mismatch: checkpoint {tuple(loaded.shape)} vs model {tuple(target.shape)}"
            )
        target.copy_(loaded)


class MergedLinear(Linear):
    """Several projections of the same input stacked row-wise; ``shard`` names one of them."""

    def __init__(self, in_features: int, shard_sizes: dict[str | int, int], bias: bool = False) -> None:
        super().__init__(in_features, sum(shard_sizes.values()), bias)
        self.shard_sizes = dict(shard_sizes)
        self._offsets: dict[str | int, int] = {}
        offset = 0
        for name, size in shard_sizes.items():
            self._offsets[name] = offset
            offset += size

    def shard_rows(self, shard: str | int | None) -> slice:
        if shard is None:
            return slice(0, self.out_features)
        start = self._offsets[shard]
        return slice(start, start + self.shard_sizes[shard])
