"""The engine's one handle on speculative decoding: propose before the forward, verify after."""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from blink.engine.scheduler import ScheduledSeq
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.policy import SpeculationPolicy
from blink.engine.spec_decode.proposer import Proposer
from blink.engine.spec_decode.verifier import Verdict, verify


class Speculator:
    def __init__(self, proposer: Proposer, policy: SpeculationPolicy) -> None:
        self.proposer = proposer
        self.policy = policy
        # Draft distributions of this step's proposals, by request id (None = point mass).
        self._draft_probs: dict[str, torch.Tensor | None] = {}

    def lookahead(self, seq: Sequence) -> int:
        return self.policy.lookahead(seq)

    def propose(self, scheduled: Seq[ScheduledSeq]) -> None:
        """Fill ``spec_token_ids`` of every scheduled sequence that reserved lookahead slots."""
        self._draft_probs.clear()
        items = [s for s in scheduled if s.num_lookahead > 0]
        if not items:
            return
        proposals = self.proposer.propose([(s.seq, s.num_lookahead) for s in items])
        for item, proposal in zip(items, proposals, strict=True):
            k = min(len(proposal.token_ids), item.num_lookahead)
            item.spec_token_ids = proposal.token_ids[:k]
            probs = proposal.draft_probs
            self._draft_probs[item.seq.request_id] = None if probs is None else probs[:k]

    def verify(self, item: ScheduledSeq, logits: torch.Tensor) -> Verdict:
        seq = item.seq
        verdict = verify(seq, logits, item.spec_token_ids, self._draft_probs.get(seq.request_id))
        self.policy.record(
            seq.request_id, len(item.spec_token_ids), verdict.num_accepted, len(verdict.token_ids)
        )
        return verdict

    def release(self, request_id: str) -> None:
        self.policy.release(request_id)
        self.proposer.release(request_id)
