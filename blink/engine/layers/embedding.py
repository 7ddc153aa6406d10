"""Token embedding and the LM head (which may share the embedding's weight)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blink.engine.layers.packed_linear import packed_copy, packed_linear


class VocabEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)


class LMHead(nn.Module):
    """Projects hidden states to float32 logits; only the rows the sampler needs are ever passed in.

    With ``tied_to`` the head reuses the embedding matrix (SmolLM2, Qwen2.5-0.5B, Qwen3-0.6B), so
    the checkpoint has no ``lm_head.weight`` to load and memory holds one copy.
    """

    # int8 quantization may replace the head; its replacement must keep float32 logits.
    quantizable_linear = True
    float_output = True

    def __init__(self, vocab_size: int, hidden_size: int, tied_to: VocabEmbedding | None = None) -> None:
        super().__init__()
        self.tied = tied_to is not None
        if tied_to is not None:
            self.weight = tied_to.weight
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))
        # oneDNN-packed copy for the eager bf16 CPU path (see packed_linear.py); a tied head
        # packs its own copy, the embedding lookup keeps the plain table.
        self.packed_weight: torch.Tensor | None = None

    def prepack(self) -> bool:
        """Pack the loaded (or tied) weight once; False where packing does not apply."""
        self.packed_weight = packed_copy(self.weight)
        return self.packed_weight is not None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling() and self.packed_weight is not None:
            return packed_linear(hidden, self.packed_weight, None).float()
        return F.linear(hidden, self.weight).float()
