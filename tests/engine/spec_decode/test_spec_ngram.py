"""Prompt-lookup proposals."""

from __future__ import annotations

import pytest

from blink.engine.spec_decode.ngram import NgramProposer


def test_longest_tail_match_is_continued() -> None:
    p = NgramProposer(ngram_max=3, ngram_min=1)
    # Tail (7, 8, 9) occurred at the start, followed by 1 2 3.
    assert p.lookup([7, 8, 9, 1, 2, 3, 4, 5, 7, 8, 9], 3) == [1, 2, 3]


def test_most_recent_match_with_a_full_continuation_wins() -> None:
    p = NgramProposer(ngram_max=2, ngram_min=1)
    # "5 6" is followed by 1 at first and by 2 later: the later occurrence predicts better.
    assert p.lookup([5, 6, 1, 0, 5, 6, 2, 0, 5, 6], 2) == [2, 0]
    # A short loop: the latest lap ends too soon, an earlier one yields the whole guess.
    assert p.lookup([3, 4, 3, 4, 3, 4, 3], 4) == [4, 3, 4, 3]


def test_no_match_and_degenerate_inputs() -> None:
    p = NgramProposer()
    assert p.lookup([1, 2, 3, 4], 3) == []
    assert p.lookup([1], 3) == []
    assert p.lookup([1, 1, 1], 0) == []


def test_continuation_is_capped_by_what_exists() -> None:
    assert NgramProposer(ngram_max=1).lookup([9, 1, 9], 5) == [1, 9]


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        NgramProposer(ngram_max=1, ngram_min=2)
