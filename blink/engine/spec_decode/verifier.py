"""Check K proposed tokens against the target model's logits from one forward pass.

Greedy requests keep the proposals that equal the target's argmax, then take the argmax where
they first differ (or after the last one): token-for-token what plain greedy decoding emits.
Random requests use rejection sampling (Leviathan et al. 2023; Chen et al. 2023): proposal ``d``
drawn from ``q`` is kept with probability ``min(1, p(d) / q(d))``; at the first rejection the
token is drawn from ``max(0, p - q)`` renormalised; if all K survive, a bonus token is drawn from
``p`` at position K + 1. Every emitted token is then distributed exactly as under ``p``, the
sampler's processed distribution (temperature, min_p, top-k, top-p).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blink.engine.sampler import processed_probs, sample_inverse_cdf
from blink.engine.sequence import Sequence


@dataclass
class Verdict:
    # Tokens to append, in order: the accepted proposals, then one corrected or bonus token.
    token_ids: list[int]
    num_accepted: int


def verify(
    seq: Sequence, logits: torch.Tensor, proposal: list[int], draft_probs: torch.Tensor | None
) -> Verdict:
    """``logits`` is ``[len(proposal) + 1, vocab]``: row i scores the token after proposal[:i]."""
    k = len(proposal)
    if logits.shape[0] != k + 1:
        raise ValueError(f"{logits.shape[0]} logit rows for {k} proposed tokens")
    if seq.params.is_greedy:
        return _verify_greedy(logits, proposal)
    return _verify_random(seq, logits, proposal, draft_probs)


def _verify_greedy(logits: torch.Tensor, proposal: list[int]) -> Verdict:
    best = logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(proposal) and proposal[accepted] == best[accepted]:
        accepted += 1
    return Verdict(proposal[:accepted] + [best[accepted]], accepted)


def _verify_random(
    seq: Sequence, logits: torch.Tensor, proposal: list[int], draft_probs: torch.Tensor | None
) -> Verdict:
    k = len(proposal)
    p = processed_probs(logits.float(), [seq.params] * (k + 1))
    u = _uniforms(seq, k + 1, logits.device)
    index = torch.arange(k, device=logits.device)
    drafted = torch.tensor(proposal, dtype=torch.long, device=logits.device)
    p_d = p[index, drafted].to(torch.float64)
    q_d = (
        torch.ones_like(p_d)
        if draft_probs is None
        else draft_probs[index, drafted].to(torch.float64)
    )
    # u < p/q  <=>  u * q < p; no division, and q = 0 (never drawn) cannot divide by zero.
    rejected = (u[:k] * q_d >= p_d).tolist()
    accepted = next((i for i, r in enumerate(rejected) if r), k)
    if accepted == k:
        final = p[k]
    else:
        final = _residual(p[accepted], accepted, proposal, draft_probs)
    token = int(sample_inverse_cdf(final.unsqueeze(0), u[k : k + 1])[0])
    return Verdict(proposal[:accepted] + [token], accepted)


def _residual(
    p_row: torch.Tensor, i: int, proposal: list[int], draft_probs: torch.Tensor | None
) -> torch.Tensor:
    """``max(0, p - q)`` at the rejected position (unnormalised; the draw normalises)."""
    if draft_probs is None:
        residual = p_row.clone()
        residual[proposal[i]] = 0.0
    else:
        residual = (p_row - draft_probs[i].to(p_row.dtype)).clamp_min(0.0)
    # A rejection implies p(d) < q(d), so some other token has p > q; float rounding can still
    # leave no mass, and then p itself is the right fallback.
    return residual if float(residual.sum()) > 0.0 else p_row


def _uniforms(seq: Sequence, n: int, device: torch.device) -> torch.Tensor:
    """Seeded requests draw from their own generator, as the plain sampler does."""
    if seq.params.seed is None:
        return torch.rand(n, dtype=torch.float64, device=device)
    if seq.generator is None:
        seq.generator = torch.Generator(device=device)
        seq.generator.manual_seed(seq.params.seed)
    return torch.rand(n, dtype=torch.float64, device=device, generator=seq.generator)
