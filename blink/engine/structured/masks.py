"""One step's token bitmask: filled on a worker thread while the model runs, applied before sampling.

The mask of a request's next token depends only on the tokens it has accepted, all known when the
step is scheduled, so it is computed during the forward pass instead of after it: the sampler then
waits only for whatever of the fill outlasted the forward. Both grammar engines fill masks in native
code that releases the GIL, as torch's kernels do, so the two overlap on separate cores. The
bitmask layout is the one both use.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from blink.engine.structured.matcher import GrammarState

log = logging.getLogger("blink.engine")


def new_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """The packed layout xgrammar and llguidance share: bit ``t % 32`` of word ``t // 32`` set = token ``t`` allowed."""
    return torch.full((num_rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
    """Set the logits of forbidden tokens to -inf in ``rows`` (in place; bitmask row i masks
    logits row i). xgrammar's CPU kernel: 16 rows of a 49k vocabulary in about a tenth of the time
    an unpack-and-``masked_fill`` in torch takes."""
    if not rows:
        return
    import xgrammar as xgr

    n = logits.shape[0]
    xgr.apply_token_bitmask_inplace(logits, bitmask[:n], vocab_size=logits.shape[1], indices=rows)


@dataclass
class StepMask:
    """The rows of this step's logits that a grammar constrains, and their allowed tokens.

    ``rows`` are masked before sampling; ``lazy`` rows (``structured.lazy``) are sampled unmasked,
    and only those whose sample the grammar refuses are masked afterwards (``mask_refused``).
    """

    bitmask: torch.Tensor
    rows: list[int]
    filling: Future[None] | None = None
    lazy: list[tuple[int, GrammarState]] = field(default_factory=list)

    def apply(self, logits: torch.Tensor) -> None:
        if self.filling is not None:
            self.filling.result()  # re-raises a fill failure: the step's caller handles it
        apply_bitmask(logits, self.bitmask, self.rows)

    def mask_refused(self, logits: torch.Tensor, refused: list[tuple[int, GrammarState]]) -> None:
        """Fill and apply the rows of lazy samples the grammar refused, here and now (the forward
        is over: nothing left to overlap with)."""
        _fill(self.bitmask, refused)
        apply_bitmask(logits, self.bitmask, [row for row, _ in refused])


class GrammarMasker:
    """Owns the fill thread: ``new_mask`` and ``start`` before the forward, ``StepMask.apply`` after."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="blink-grammar-mask")
        # Lazy rows whose unmasked sample was checked, and how many of those the grammar refused.
        self.lazy_checked = 0
        self.lazy_refused = 0

    def count_lazy(self, checked: int, refused: int) -> None:
        self.lazy_checked += checked
        self.lazy_refused += refused

    def new_mask(self, max_rows: int) -> StepMask:
        """An all-allowed mask for up to ``max_rows`` logit rows; the caller may fill rows itself
        (speculative rows, which must be known before the forward) and list them in ``rows``."""
        return StepMask(new_bitmask(max_rows, self.vocab_size), [])

    def start(self, mask: StepMask, deferred: list[tuple[int, GrammarState]]) -> None:
        """Fill ``deferred`` (logit row, grammar) pairs on the worker thread, during the forward."""
        mask.rows.extend(r for r, _ in deferred)
        if deferred:
            mask.filling = self._pool.submit(_fill, mask.bitmask, deferred)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _fill(bitmask: torch.Tensor, rows: list[tuple[int, GrammarState]]) -> None:
    """A row whose fill fails forbids every token: its request then fails alone (the engine's
    accept check refuses whatever is drawn) instead of the whole step."""
    for row, state in rows:
        try:
            state.fill(bitmask, row)
        except Exception:
            log.exception("filling a grammar mask failed")
            bitmask[row] = 0
