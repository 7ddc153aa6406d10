"""Prompt-lookup proposals: continue the latest earlier occurrence of the sequence's tail.

No extra model and no KV: when a response repeats its context (RAG quotes, code edits, rewrites
of a given paragraph), the tokens that followed the same n-gram last time are a cheap, often
right, guess. Longest n-gram first, most recent match first (recent context predicts best when
a text is being rewritten in order).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np

from blink.engine.sequence import Sequence
from blink.engine.spec_decode.proposer import Proposal

# Only the most recent tokens are searched: a scan this long stays small next to a decode step
# (benchmarks/RESULTS.md, "Figures behind the code's numbers", ngram), and repetition that pays off for speculation is
# almost always local.
_SEARCH_WINDOW = 4096


class NgramProposer:
    def __init__(self, ngram_max: int = 4, ngram_min: int = 1) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min

    def propose(self, requests: Seq[tuple[Sequence, int]]) -> list[Proposal]:
        return [Proposal(self.lookup(seq.token_ids, k)) for seq, k in requests]

    def release(self, request_id: str) -> None:
        return None  # stateless

    def lookup(self, token_ids: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier match of the longest tail n-gram."""
        if k <= 0 or len(token_ids) < 2:
            return []
        tokens = np.asarray(token_ids[-_SEARCH_WINDOW:], dtype=np.int64)
        length = len(tokens)
        for n in range(min(self.ngram_max, length - 1), self.ngram_min - 1, -1):
            tail = tokens[length - n :]
            # Candidate starts: every window of n tokens that ends before the tail itself starts
            # repeating (start < length - n) — the tail trivially matches itself.
            windows = np.lib.stride_tricks.sliding_window_view(tokens[: length - 1], n)
            hits = np.flatnonzero((windows[: length - n] == tail).all(axis=1))
            if hits.size:
                # Latest match that still has k tokens after it; in a short loop the very latest
                # match is followed by too few tokens, an earlier lap by the whole loop.
                full = hits[hits + n + k <= length]
                start = int(full[-1] if full.size else hits[-1]) + n
                return tokens[start : start + k].tolist()
        return []
