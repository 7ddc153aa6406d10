"""A ``torch.compile``d decoder layer for decode-only steps (every sequence adds one token).

Small-batch CPU decode pays per-op dispatch on ~25 small ops per layer on top of the matmuls;
inductor fuses the elementwise work between matmuls into a few C++ kernels. Only decode-only
steps use it: prefill is compute bound (one op per many tokens) and its per-chunk layout would
recompile the graph. Attention stays one opaque op (layers/paged_decode_op.py).

Two modes (``EngineConfig.compile_mode``):

- ``"frozen"``: the whole forward in one graph with inductor's freezing and max-autotune. The
  weights become constants, which is what lets inductor replace ``_weight_int8pack_mm`` by its
  own prepacked C++ micro-GEMM (autotuned against the aten kernel), which takes less CPU per int8
  matmul than aten's at batch 1. Where our AVX-512 ``blink::int8_gemv`` is built
  (kernels/int8_gemv.py) the 1-3-row int8 matmuls call it instead, as an opaque extern op, which is
  cheaper again than inductor's micro-GEMM. Slow to compile (every layer is its own code: minutes);
  inductor's on-disk cache makes a second start faster. Figures: benchmarks/RESULTS.md, "Batch-1
  decode: where the time goes" and "int8 GEMV kernel" (``benchmarks/decode_compile.py``).
- ``"layers"`` (regional compilation): one decoder layer is compiled and the same graph serves
  every layer (parameters are graph inputs, so the 30 layers of SmolLM2 share it). Compiles in
  seconds instead of minutes, fuses the elementwise ops, but the int8 matmuls stay aten's and 30
  guarded calls per step cost what the fusion saves (about eager's CPU per token, same RESULTS.md
  section) - kept for fp32/bf16 models without int8, not faster for Blink's best config.
  Embedding, the final norm and the LM head stay eager.

In bf16 the fused kernels (and the int8 micro-GEMM's summation order) may round differently
from eager, so on a random SmolLM2-sized model greedy tokens can part from eager's at a near
tie; fp32 "layers" and the tiny-model tests are token-for-token equal.

Shapes: batch and context width are dynamic; torch specialises size 1, so batch 1 gets its own
graph (the latency-critical one) and the block-table width is padded to at least two blocks.
In "layers" mode the first layer (no residual yet) is a second graph. ``warm_up`` compiles all of them at
start-up so no request pays compile time.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.errors import EngineError
from blink.engine.layers.attention import AttentionMetadata
from blink.engine.layers.linear_int8 import DENSE_MIN_ROWS
from blink.engine.models.registry import CausalLM

# Block-table width below which tables are padded: 1 would be specialised into its own graph.
_MIN_TABLE_WIDTH = 2
COMPILE_MODES = ("frozen", "layers")


class _DecoderStack(Protocol):
    """The parts of a Llama-family ``model.model`` the per-layer loop needs."""

    embed_tokens: nn.Module
    rotary_emb: Any
    layers: nn.ModuleList
    norm: nn.Module


def _decode_layer(
    layer: nn.Module,
    hidden: torch.Tensor,
    residual: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_tables: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    meta = AttentionMetadata(
        slot_mapping=slot_mapping,
        num_decode=hidden.shape[0],
        decode_block_tables=block_tables,
        decode_mask=mask,
    )
    return cast(tuple[torch.Tensor, torch.Tensor], layer(hidden, residual, cos, sin, meta))


# Largest decode batch + 1 the graph serves. From DENSE_MIN_ROWS rows on a step is GEMM bound and
# the eager path's pre-packed oneDNN GEMMs win (benchmarks/RESULTS.md, "Figures behind the code's numbers",
# compiled_decode), and int8-dense-prefill's dense branch would be one more graph to compile.
# Small batches, the latency-critical ones, keep the graph.
MAX_BATCH = DENSE_MIN_ROWS


class CompiledDecode:
    """Callable ``(input_ids, positions, slot_mapping, block_tables, mask) -> float32 logits``."""

    def __init__(self, model: CausalLM, mode: str = "frozen") -> None:
        if mode not in COMPILE_MODES:
            raise EngineError(f"unknown compile_mode {mode!r}; expected one of {', '.join(COMPILE_MODES)}")
        self.model = model
        self.mode = mode
        self._stack = cast(_DecoderStack, cast(Any, model).model)
        # emulate_precision_casts: fused bf16 kernels round intermediates to bf16 where eager
        # does, so greedy tokens stay those of the eager forward.
        if mode == "layers":
            self._layer = torch.compile(
                _decode_layer, dynamic=True, fullgraph=True, options={"emulate_precision_casts": True}
            )
        else:
            options = {"freezing": True, "max_autotune": True, "emulate_precision_casts": True}
            self._whole = torch.compile(self._forward, dynamic=True, fullgraph=True, options=options)

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
            # Once per step for every layer's attention: the mask is 0 on each sequence's cached prefix.
            decode_context_lens=(mask.reshape(input_ids.shape[0], -1) == 0).sum(-1),
        )
        return self.model.compute_logits(self.model(input_ids, positions, meta))

    @staticmethod
    def serves(batch: int) -> bool:
        """Whether a decode-only step of ``batch`` sequences should run through the graph."""
        return batch < MAX_BATCH

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
        if self.mode == "frozen":
            return cast(torch.Tensor, self._whole(input_ids, positions, slot_mapping, block_tables, mask))
        stack = self._stack
        hidden = stack.embed_tokens(input_ids)
        cos, sin = stack.rotary_emb.lookup(positions, hidden.dtype)
        residual: torch.Tensor | None = None
        for layer in stack.layers:
            hidden, residual = self._layer(layer, hidden, residual, cos, sin, slot_mapping, block_tables, mask)
        hidden, _ = stack.norm(hidden, residual)
        return self.model.compute_logits(hidden)

    def warm_up(self, block_size: int, dtype: torch.dtype, device: torch.device) -> None:
        """Compile the batch-1 and batch-n graphs now, writing only into slots of block 0.

        Block 0 holds no sequence yet; whatever lands there is overwritten before any sequence
        reads it (a slot is always written in the step that first attends to it).
        """
        for batch in (1, 2):  # 1 is specialised into its own graph; 2 covers 2..MAX_BATCH-1
            ids = torch.zeros(batch, dtype=torch.long, device=device)
            positions = torch.arange(batch, device=device)
            tables = torch.zeros(batch, _MIN_TABLE_WIDTH, dtype=torch.long, device=device)
            mask = torch.zeros(batch, 1, 1, _MIN_TABLE_WIDTH * block_size, dtype=dtype, device=device)
            self(ids, positions, positions.clone(), tables, mask)
