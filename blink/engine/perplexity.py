"""Teacher-forced perplexity through the engine's own forward: what a serving mode costs in quality.

A serving mode (dtype, int8 weights, W8A8 prefill, an fp8/int8 KV cache) changes how the model
runner computes, so its quality is measured through the runner, on the paths requests take, not
on a reference implementation that shares none of them:

- ``chunk`` of 64+ tokens is the prefill path: each chunk after a window's first reads the earlier
  ones back from the KV cache, so a quantized KV cache is part of what is measured;
- ``chunk`` of a few tokens is the decode path: spans whose every token needs logits are what
  speculative verification runs, which takes the fused C++ decode step where the model is
  eligible (int8 weights even in ``int8-dense-prefill``, whose prefill keeps the dense weights).

The text is cut into windows scored independently (each starts with an empty context), so the
figure depends only on the tokens and the window, never on the KV pool's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from blink.engine.errors import EngineError
from blink.engine.model_runner import ModelRunner, RunSpan


@dataclass(frozen=True)
class Perplexity:
    """Summed negative log-likelihood (nats) over ``tokens`` predicted tokens."""

    nll: float
    tokens: int

    @property
    def value(self) -> float:
        return math.exp(self.nll / self.tokens)


def perplexity(runner: ModelRunner, token_ids: Sequence[int], window: int = 512, chunk: int = 128) -> Perplexity:
    """Perplexity of ``token_ids`` under ``runner``'s model, each window fed ``chunk`` tokens at a time.

    Every token but a window's first is predicted from the logits of the one before it. The
    runner's KV pool is used from block 0 up, so no sequence may be running on it meanwhile.
    """
    if window < 2 or chunk < 1:
        raise EngineError(f"window must be at least 2 and chunk at least 1, got {window} and {chunk}")
    if len(token_ids) < 2:
        raise EngineError("perplexity needs at least two tokens")
    blocks = -(-window // runner.block_size)
    if blocks > runner.num_blocks or window > runner.max_model_len:
        raise EngineError(
            f"a {window}-token window needs {blocks} KV blocks and max_model_len >= {window}; "
            f"the runner has {runner.num_blocks} blocks and max_model_len {runner.max_model_len}"
        )
    table = list(range(blocks))
    nll, count = 0.0, 0
    for begin in range(0, len(token_ids) - 1, window):
        ids = list(token_ids[begin : begin + window])
        if len(ids) < 2:
            break
        rows = [
            runner.execute_spans([RunSpan("ppl", ids[s : s + chunk], s, table, len(ids[s : s + chunk]))])
            for s in range(0, len(ids), chunk)
        ]
        logits = torch.cat(rows)[:-1].float()  # the last position predicts past the window
        targets = torch.tensor(ids[1:], dtype=torch.long, device=logits.device)
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])
        nll -= float(logprobs.sum())
        count += len(targets)
    return Perplexity(nll, count)
