"""One request's position in its grammar, whichever grammar engine compiled it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blink.engine.structured.lazy import LazyPolicy

if TYPE_CHECKING:
    import torch

    from blink.engine.structured.grammar_engine import CompiledGrammar


class GrammarState:
    """Wraps a ``grammar_engine.Matcher``: the tokens accepted so far decide the next mask."""

    def __init__(self, compiled: CompiledGrammar, extra_mask: torch.Tensor | None = None) -> None:
        self.matcher = compiled.new_matcher()
        # ANDed into every mask row (GrammarCompiler.extra_mask): tokens never allowed for this kind.
        self.extra_mask = extra_mask
        # Whether this request's next step samples before masking (``lazy``).
        self.lazy = LazyPolicy()

    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token; False if the grammar forbids it (the mask should have)."""
        return bool(self.matcher.accept_token(token_id))

    def allows(self, token_id: int) -> bool:
        """Whether the grammar would accept ``token_id`` next; the state is left as it was."""
        if self.extra_mask is not None and not (int(self.extra_mask[token_id >> 5]) >> (token_id & 31)) & 1:
            return False
        if not self.matcher.accept_token(token_id):
            return False
        self.matcher.rollback(1)
        return True

    @property
    def terminated(self) -> bool:
        """A stop token was accepted at a point where the grammar is complete."""
        return bool(self.matcher.is_terminated())

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, row)
        if self.extra_mask is not None:
            bitmask[row] &= self.extra_mask

    def check_drafts(self, drafts: list[int], bitmask: torch.Tensor, first_row: int) -> int:
        """Fill the mask rows of a speculative step and return how many drafts the grammar allows.

        Row ``first_row + i`` scores the token after ``drafts[:i]``, so it gets the mask of the
        state after accepting those drafts. The walk stops at the first draft the grammar rejects:
        the caller drops it and the drafts after it, which can never be accepted. The matcher is
        rolled back, so only tokens the verifier keeps advance it.
        """
        accepted = 0
        self.fill(bitmask, first_row)
        for token in drafts:
            if not self.matcher.accept_token(token):
                break
            accepted += 1
            if self.matcher.is_terminated():  # a stop token ends the output: nothing follows it
                break
            self.fill(bitmask, first_row + accepted)
        if accepted:
            self.matcher.rollback(accepted)
        return accepted
