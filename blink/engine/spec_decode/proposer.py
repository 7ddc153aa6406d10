"""What a proposer returns and the interface every proposer implements."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Protocol

import torch

from blink.engine.sequence import Sequence


@dataclass
class Proposal:
    """Up to K guessed next tokens for one sequence.

    ``draft_probs`` (``[len(token_ids), vocab]``) is the distribution each token was drawn from;
    None means a point mass on the token (n-gram lookup), which rejection sampling handles as
    q(token) = 1.
    """

    token_ids: list[int]
    draft_probs: torch.Tensor | None = None


class Proposer(Protocol):
    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        """One proposal per ``(sequence, max tokens)``; called after the scheduler reserved KV
        slots for them, before the target forward."""
        ...

    def release(self, request_id: str) -> None:
        """Forget per-request state (the request finished, was aborted or preempted)."""
        ...
