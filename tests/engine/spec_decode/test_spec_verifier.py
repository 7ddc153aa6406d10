"""Verification: greedy keeps the matching prefix; rejection sampling reproduces the target
distribution exactly (chi-square on fixed seeds)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from blink.engine.sampler import processed_probs
from blink.engine.sampling_params import SamplingParams
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.verifier import verify

# Significance level of the goodness-of-fit tests: with fixed seeds the outcome is deterministic,
# and 1e-3 leaves a wide margin against a fluke while a real bias (e.g. accepting every draft)
# yields p-values below 1e-100 at these sample sizes.
_ALPHA = 1e-3
_DRAWS = 6000


def _seq(params: SamplingParams) -> Sequence:
    return Sequence("r", [1, 2, 3], params, frozenset())


def test_greedy_keeps_the_matching_prefix_then_the_argmax() -> None:
    logits = torch.full((4, 8), -5.0)
    for row, tok in enumerate([3, 5, 1, 6]):
        logits[row, tok] = 5.0
    seq = _seq(SamplingParams(temperature=0.0))
    assert verify(seq, logits, [3, 5, 2], None).token_ids == [3, 5, 1]
    assert verify(seq, logits, [3, 5, 1], None).token_ids == [3, 5, 1, 6]  # all kept + bonus
    v = verify(seq, logits, [4, 5, 1], None)
    assert (v.token_ids, v.num_accepted) == ([3], 0)


def test_row_count_must_match() -> None:
    with pytest.raises(ValueError):
        verify(_seq(SamplingParams(temperature=0.0)), torch.zeros(2, 4), [1, 2], None)


def _first_two(params: SamplingParams, logits: torch.Tensor, proposal: list[int], q: torch.Tensor | None):
    """Verify ``_DRAWS`` times; with a draft distribution ``q`` each proposal is drawn from it
    (rejection sampling is exact only for proposals that really come from q)."""
    firsts: Counter[int] = Counter()
    seconds: Counter[int] = Counter()
    torch.manual_seed(1234)
    for _ in range(_DRAWS):
        if q is not None:
            proposal = torch.multinomial(q, 1).squeeze(1).tolist()
        v = verify(_seq(params), logits, proposal, q)
        firsts[v.token_ids[0]] += 1
        if len(v.token_ids) > 1:
            seconds[v.token_ids[1]] += 1
    return firsts, seconds


def _check_fit(counts: Counter[int], probs: torch.Tensor) -> None:
    support = [t for t in range(probs.numel()) if probs[t] > 0]
    observed = [counts[t] for t in support]
    assert sum(counts.values()) == sum(observed), "a token outside the distribution's support was drawn"
    total = float(probs[support].double().sum())
    expected = [float(probs[t]) / total * sum(observed) for t in support]
    assert chisquare(observed, expected).pvalue > _ALPHA


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=4),
        SamplingParams(temperature=1.3, top_p=0.8, min_p=0.02),
    ],
    ids=["plain", "top_k", "top_p_min_p"],
)
@pytest.mark.parametrize("draft", ["point_mass", "draft_distribution"])
def test_rejection_sampling_matches_the_target(params: SamplingParams, draft: str) -> None:
    gen = torch.Generator().manual_seed(7)
    vocab = 8
    logits = torch.randn(3, vocab, generator=gen) * 1.5
    target = processed_probs(logits, [params] * 3)
    proposal = [int(target[0].argsort()[-2]), 2]  # a plausible but not the likeliest first guess
    q = None
    if draft == "draft_distribution":
        q = torch.softmax(torch.randn(2, vocab, generator=gen), dim=-1)
    firsts, seconds = _first_two(params, logits, proposal, q)
    _check_fit(firsts, target[0])
    # Given the first proposal was kept, the next token follows the target's second row.
    _check_fit(seconds, target[1])
    # Sanity: proposals were both kept and rejected.
    assert 0 < sum(seconds.values()) < _DRAWS


def test_seeded_requests_are_reproducible() -> None:
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(3))
    params = SamplingParams(temperature=1.0, seed=42)
    a = [verify(s, logits, [1, 2], None).token_ids for s in (_seq(params),) for _ in range(5)]
    b = [verify(s, logits, [1, 2], None).token_ids for s in (_seq(params),) for _ in range(5)]
    assert a == b
