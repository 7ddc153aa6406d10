"""A ``torch.compile``d forward for decode-only steps (every sequence adds one token).

Small-batch CPU decode pays per-op dispatch on ~25 small ops per layer on top of the matmuls;
inductor fuses the elementwise work between matmuls into a few C++ kernels. Only decode-only
steps use it: prefill is compute bound (one op per many tokens) and its per-chunk layout would
recompile the graph. Attention stays one opaque op (layers/paged_decode_op.py).

Shapes: batch and context width are dynamic; torch specialises size 1, so batch 1 gets its own
graph (the latency-critical one) and the block-table width is padded to at least two blocks.
``warm_up`` compiles both graphs at start-up so no request pays compile time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from blink.engine.layers.attention import AttentionMetadata
from blink.engine.models.registry import CausalLM

# Block-table width below which tables are padded: 1 would be specialised into its own graph.
_MIN_TABLE_WIDTH = 2


class CompiledDecode:
    """Callable ``(input_ids, positions, slot_mapping, block_tables, mask) -> float32 logits``."""

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self._fn = torch.compile(self._forward, dynamic=True, fullgraph=True)

    def _forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_tables: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        meta = AttentionMetadata(
            slot_mapping=slot_mapping,
            num_decode=input_ids.shape[0],
            decode_block_tables=block_tables,
            decode_mask=mask,
        )
        return self.model.compute_logits(self.model(input_ids, positions, meta))

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_tables: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        pad = _MIN_TABLE_WIDTH - block_tables.shape[1]
        if pad > 0:
            block_size = mask.shape[-1] // block_tables.shape[1]
            block_tables = F.pad(block_tables, (0, pad))  # block 0, hidden by the mask
            mask = F.pad(mask, (0, pad * block_size), value=float("-inf"))
        return self._fn(input_ids, positions, slot_mapping, block_tables, mask)

    def warm_up(self, block_size: int, dtype: torch.dtype, device: torch.device) -> None:
        """Compile the batch-1 and batch-n graphs now, writing only into slots of block 0.

        Block 0 holds no sequence yet; whatever lands there is overwritten before any sequence
        reads it (a slot is always written in the step that first attends to it).
        """
        for batch in (1, 2):
            ids = torch.zeros(batch, dtype=torch.long, device=device)
            positions = torch.arange(batch, device=device)
            tables = torch.zeros(batch, _MIN_TABLE_WIDTH, dtype=torch.long, device=device)
            mask = torch.zeros(batch, 1, 1, _MIN_TABLE_WIDTH * block_size, dtype=dtype, device=device)
            self(ids, positions, positions.clone(), tables, mask)
