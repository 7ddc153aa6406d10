"""Lazy masking: sample from the unmasked logits first, and build the mask only when the grammar
refuses the sample.

A full mask walks the whole vocabulary for each constrained row every step, and on a 2-core CPU
its fill thread competes with the forward pass; asking the grammar whether one token is allowed
costs microseconds. When the model mostly follows the grammar (a real model asked for JSON), most
steps need no mask at all.

Exact where it is used:
- greedy: the argmax of the unmasked logits, if allowed, is the argmax of the masked ones (masking
  only removes candidates; ties break to the lowest id either way);
- temperature sampling without truncation: drawing ``x ~ p`` and, if ``x`` is forbidden, drawing
  again from ``p`` restricted to the allowed set ``A`` gives ``p(x) + (1 - p(A)) p(x) / p(A) =
  p(x) / p(A)`` for ``x`` in ``A``: the masked distribution.

Not exact, so never used: top-k / top-p / min-p (the truncation must see the masked distribution:
the kept set and its mass change with the mask) and requested logprobs (reported over the masked
distribution). Penalties, ``logit_bias`` and ``min_tokens`` act on logits before the draw, the same
in both orders.

A request whose samples keep being refused (random weights, a token the model likes but the
grammar forbids) would pay the unmasked draw and then a mask fill after the forward, no longer
overlapped with it; ``LazyPolicy`` then returns it to eager masking for a doubling number of
steps, and tries lazily again after them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blink.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from blink.engine.structured.masks import StepMask
    from blink.engine.structured.matcher import GrammarState

log = logging.getLogger("blink.engine")

# Longest run of eager steps after repeated refusals, before the next lazy try. A bound that keeps
# a request whose model starts to follow the grammar (past a forced prefix, say) from staying
# eager for long, while a hopeless one tries lazily in at most one step in 33 (~3% overhead).
_MAX_BACKOFF = 32


def lazy_exact(params: SamplingParams) -> bool:
    """Whether sample-then-check gives exactly the masked distribution for these parameters."""
    if params.logprobs is not None:
        return False
    if params.is_greedy:
        return True
    return params.top_k in (-1, 0) and params.top_p >= 1.0 and params.min_p <= 0.0


@dataclass
class LazyPolicy:
    """One request's choice between lazy and eager masking, from its own refusals only (so a seeded
    request's draws never depend on which other requests share its batch)."""

    # Eager steps left before the next lazy try, and how many the next refusal buys.
    eager_left: int = 0
    backoff: int = 1

    def lazy_now(self) -> bool:
        """Called once per step in which the request samples: True = skip the eager mask fill."""
        if self.eager_left > 0:
            self.eager_left -= 1
            return False
        return True

    def record(self, allowed: bool) -> None:
        """The outcome of a lazy step: its unmasked sample was ``allowed`` by the grammar."""
        if allowed:
            self.backoff = 1
        else:
            self.eager_left = self.backoff
            self.backoff = min(2 * self.backoff, _MAX_BACKOFF)


def resample_refused(mask: StepMask, logits: torch.Tensor, rows: list[int], seqs: Sequence[Any],
                     results: list[Any], sample: Callable[[torch.Tensor, list[Any]], list[Any]]) -> tuple[int, int]:
    """Check the unmasked samples of ``mask.lazy`` rows against their grammars; mask the refused
    rows of ``logits`` and draw them again with ``sample``, in place in ``results``.

    ``results[j]`` (a ``SampleResult`` or None if its draw failed) is the sample of logit row
    ``rows[j]`` for ``seqs[j]``. Returns (lazy rows checked, rows refused).
    """
    where = {row: j for j, row in enumerate(rows)}
    refused: list[tuple[int, GrammarState]] = []
    checked = 0
    for row, grammar in mask.lazy:
        j = where.get(row)
        res = results[j] if j is not None else None
        if j is None or res is None:  # not sampled this step (a prefill chunk), or its draw failed
            continue
        checked += 1
        try:
            allowed = grammar.allows(res.token_id)
        except Exception:  # the fill below then forbids the row: this request fails alone
            log.exception("checking a token against request %s's grammar failed", seqs[j].request_id)
            allowed = False
        grammar.lazy.record(allowed)
        if not allowed:
            refused.append((row, grammar))
    if refused:
        mask.mask_refused(logits, refused)
        again = sample(logits[[row for row, _ in refused]], [seqs[where[row]] for row, _ in refused])
        for (row, _), res in zip(refused, again, strict=True):
            results[where[row]] = res
    return checked, len(refused)
