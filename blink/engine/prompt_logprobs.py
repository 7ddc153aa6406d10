"""Log-probabilities of the prompt's own tokens, from the prefill's per-position logits.

Completions' ``echo`` with ``logprobs`` (lm-evaluation-harness scores log-likelihoods this way)
and vLLM's ``prompt_logprobs`` both ask for them. Logits row ``j`` of a chunk starting at
position ``start`` predicts the token at ``start + j + 1``, so the first prompt token has none.
The values are the raw model's (log_softmax of the logits), as for sampled tokens.
"""

from __future__ import annotations

import torch

from blink.engine.outputs import TokenLogprobOut


def prompt_token_logprobs(logits: torch.Tensor, targets: list[int], num_top: int) -> list[TokenLogprobOut]:
    """One entry per row: the target token's logprob and rank (1 = most likely), and the
    ``num_top`` most likely tokens. ``logits`` is ``[len(targets), vocab]``."""
    if logits.shape[0] != len(targets):
        raise ValueError(f"{logits.shape[0]} logit rows for {len(targets)} prompt tokens")
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(targets, dtype=torch.long, device=logits.device).unsqueeze(1)
    chosen = logprobs.gather(1, index)
    # Rank as vLLM counts it: 1 + how many tokens are strictly more likely.
    ranks = (logprobs > chosen).sum(dim=-1).add_(1).tolist()
    values = chosen.squeeze(1).tolist()
    tops: list[list[tuple[int, float]]] = [[] for _ in targets]
    if num_top > 0:
        vals, ids = logprobs.topk(min(num_top, logprobs.shape[1]), dim=-1)
        tops = [list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), vals.tolist(), strict=True)]
    return [
        TokenLogprobOut(t, float(v), top, rank=int(r))
        for t, v, top, r in zip(targets, values, tops, ranks, strict=True)
    ]
