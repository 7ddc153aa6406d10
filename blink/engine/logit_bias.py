"""OpenAI's ``logit_bias``: a per-request additive term on chosen token logits, before sampling.

Its own step (not folded into penalties or a grammar mask) so each logits processor stays one
small function the sampler calls in a fixed order. Like penalties, it shapes what is drawn, not
the reported logprobs (those describe the raw model; see ``sampler``).
"""

from __future__ import annotations

import torch

from blink.engine.sequence import Sequence


def has_logit_bias(seq: Sequence) -> bool:
    return bool(seq.params.logit_bias)


def apply_logit_bias(logits: torch.Tensor, seqs: list[Sequence], rows: list[int]) -> None:
    """Add each row's bias in place; one scatter per row (a request biases a handful of ids)."""
    vocab = logits.shape[1]
    for i in rows:
        bias = seqs[i].params.logit_bias or {}
        # request_checks refuses ids outside the vocabulary; this keeps a tokenizer larger than
        # the model's head from indexing past it.
        ids = [t for t in bias if 0 <= t < vocab]
        if not ids:
            continue
        index = torch.tensor(ids, dtype=torch.long, device=logits.device)
        values = torch.tensor([float(bias[t]) for t in ids], dtype=logits.dtype, device=logits.device)
        logits[i].index_add_(0, index, values)
