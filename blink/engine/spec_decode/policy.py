"""How many tokens to speculate for a sequence this step, and the counters behind that choice."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from blink.engine.sequence import Sequence

# Stop lengthening the guess once the chance that one more token survives drops below this.
# (Set when one more verified position cost ~5-10% of a decode step; with the fused step it costs
# ~45%, see _COST_PER_TOKEN, so at moderate acceptance this K is longer than the cost-optimal one.)
_MIN_MARGINAL_ACCEPT = 0.1
# A verification step's cost per proposed token, relative to a one-row decode step: a 2-row fused
# verification step (blink::DecodeStep, SmolLM2 shape, int8 weights, 2 threads) took ~1.45x a
# one-row step. One proposal emits 1 + a tokens on average for 1 + 0.45 of the cost, so below
# an acceptance of 0.45 speculating slows the request down.
_COST_PER_TOKEN = 0.45
# While speculation does not pay for a request it still proposes one token every this many of
# its steps, so a recovering acceptance rate is noticed (a probe's extra cost: 0.45 / 16, < 3%).
_PROBE_EVERY = 16
# Weight of the newest observation in each request's acceptance-rate average.
_EWMA_ALPHA = 0.3
# Starting estimate before a request has been verified once: optimistic enough to try K tokens.
_INITIAL_ACCEPT = 0.8


@dataclass
class SpecCounters:
    proposed: int = 0
    accepted: int = 0
    # Sequence-steps that verified at least one proposed token, and the tokens they emitted.
    verify_steps: int = 0
    emitted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.emitted / self.verify_steps if self.verify_steps else 0.0


class SpeculationPolicy:
    """Adaptive K per request (from its own acceptance rate), off for large batches.

    With per-token acceptance ``a``, the i-th proposed token survives with probability ``a**i``;
    K is the largest length whose last token still survives with probability
    ``_MIN_MARGINAL_ACCEPT``, capped at ``max_k``. Where even one proposal costs more than it
    saves (``a <= _COST_PER_TOKEN``) the request decodes plainly, probing with one proposal every
    ``_PROBE_EVERY`` steps to refresh ``a``. Outputs never depend on K (verification is exact).
    """

    def __init__(
        self,
        max_k: int,
        max_batch: int,
        max_model_len: int,
        num_running: Callable[[], int],
    ) -> None:
        if max_k < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {max_k}")
        self.max_k = max_k
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self._num_running = num_running
        self._accept: dict[str, float] = {}
        self._idle: dict[str, int] = {}  # steps since a request last proposed while it does not pay
        self.counters = SpecCounters()

    @staticmethod
    def eligible(seq: Sequence) -> bool:
        """Penalties depend on each newly accepted token and min_tokens masks change mid-run,
        so such requests decode one token at a time; so do ``logit_bias`` requests (verification
        measures the unbiased distribution); ``speculative: false`` opts out."""
        p = seq.params
        return (p.speculative and not p.has_penalties and not p.logit_bias
                and seq.num_output_tokens >= p.min_tokens)

    def lookahead(self, seq: Sequence) -> int:
        if self._num_running() > self.max_batch or not self.eligible(seq):
            return 0
        a = self._accept.get(seq.request_id, _INITIAL_ACCEPT)
        if not self._pays(seq.request_id, a):
            return 0
        k = self.max_k if a >= 1.0 else int(math.log(_MIN_MARGINAL_ACCEPT) / math.log(max(a, 1e-6)))
        k = max(1, min(self.max_k, k))
        # Emitted tokens (k accepted + 1) must fit max_tokens and the context window.
        if seq.params.max_tokens is not None:
            k = min(k, seq.params.max_tokens - seq.num_output_tokens - 1)
        return max(0, min(k, self.max_model_len - seq.num_tokens))

    def _pays(self, request_id: str, a: float) -> bool:
        """Whether to propose this step: when 1 + a tokens per 1 + _COST_PER_TOKEN of cost beats
        plain decoding, or as the every-_PROBE_EVERY-steps probe of a request where it does not."""
        if a > _COST_PER_TOKEN:
            self._idle.pop(request_id, None)
            return True
        idle = self._idle.get(request_id, 0) + 1
        self._idle[request_id] = 0 if idle >= _PROBE_EVERY else idle
        return idle >= _PROBE_EVERY

    def record(self, request_id: str, proposed: int, accepted: int, emitted: int) -> None:
        if proposed <= 0:
            return
        c = self.counters
        c.proposed += proposed
        c.accepted += accepted
        c.verify_steps += 1
        c.emitted += emitted
        prev = self._accept.get(request_id, _INITIAL_ACCEPT)
        self._accept[request_id] = (1 - _EWMA_ALPHA) * prev + _EWMA_ALPHA * (accepted / proposed)

    def release(self, request_id: str) -> None:
        self._accept.pop(request_id, None)
        self._idle.pop(request_id, None)
