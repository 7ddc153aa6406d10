"""Choosing the cascade's logprob threshold and the classifier's margin from labelled outcomes.

Both knobs answer one question: should this request stay on the cheap tier? A calibration run
(``benchmarks/router_calibration.py``) asks the real small model questions with checkable answers
and records, per prompt, a score (higher = keep it on the small tier) and whether the small model
answered correctly. A threshold on that score is chosen on one split and reported on another,
so the reported figures are not tuned to the data they describe.

The objective is balanced accuracy (the mean of "right answers kept" and "wrong answers
escalated"): it does not reward the trivial policies (keep all, escalate all) however lopsided
the small model's success rate is on the prompt set.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """One prompt: the policy's score for keeping it on the small tier, and whether that was right."""

    score: float
    ok: bool


@dataclass(frozen=True)
class Rates:
    """What a threshold does to a set of outcomes (keep on the small tier iff score >= threshold)."""

    threshold: float
    n: int
    kept_ok: float  # share of right answers the threshold keeps on the small tier
    escalated_wrong: float  # share of wrong answers it sends up a tier
    escalated: float  # share of all requests it sends up a tier
    balanced_accuracy: float


def split(items: Sequence[T], key: Callable[[T], str], held_out_share: float = 0.5) -> tuple[list[T], list[T]]:
    """(calibration, held-out), decided per item by a hash of its key: stable across runs and
    independent of order, so adding prompts never moves the existing ones between splits."""
    if not 0.0 < held_out_share < 1.0:
        raise ValueError("held_out_share must be strictly between 0 and 1")
    calibration: list[T] = []
    held_out: list[T] = []
    for item in items:
        digest = hashlib.sha256(key(item).encode()).digest()
        (held_out if int.from_bytes(digest[:8], "big") / 2**64 < held_out_share else calibration).append(item)
    return calibration, held_out


def rates(outcomes: Sequence[Outcome], threshold: float) -> Rates:
    right = [o for o in outcomes if o.ok]
    wrong = [o for o in outcomes if not o.ok]
    kept_ok = sum(o.score >= threshold for o in right) / len(right) if right else math.nan
    escalated_wrong = sum(o.score < threshold for o in wrong) / len(wrong) if wrong else math.nan
    escalated = sum(o.score < threshold for o in outcomes) / len(outcomes) if outcomes else math.nan
    return Rates(threshold, len(outcomes), kept_ok, escalated_wrong, escalated, (kept_ok + escalated_wrong) / 2)


def choose_threshold(outcomes: Sequence[Outcome]) -> Rates:
    """The threshold with the best balanced accuracy on ``outcomes``.

    Candidates are the midpoints between neighbouring distinct finite scores (a threshold on a
    score itself would depend on ``>=`` vs ``>``), plus one below all of them (keep everything).
    Ties go to the lowest threshold: the one that escalates least, so the cheaper policy.
    """
    if not any(o.ok for o in outcomes) or all(o.ok for o in outcomes):
        raise ValueError("calibration needs both right and wrong answers among the outcomes")
    finite = sorted({o.score for o in outcomes if math.isfinite(o.score)})
    if not finite:
        raise ValueError("calibration needs at least one finite score")
    candidates = [finite[0] - 1.0] + [(a + b) / 2 for a, b in zip(finite, finite[1:], strict=False)] + [finite[-1] + 1.0]
    best = rates(outcomes, candidates[0])
    for t in candidates[1:]:
        r = rates(outcomes, t)
        if r.balanced_accuracy > best.balanced_accuracy + 1e-12:
            best = r
    return best


def classifier_keep_score(label: str, margin: float, small_labels: frozenset[str]) -> float:
    """A classifier decision as a score for ``choose_threshold``.

    With ``min_margin`` m, ``ClassifierPolicy`` sends a prompt to its label's tier when the margin
    is at least m and abstains below it; an abstention falls to the route's default tier, the
    cheapest one unless configured otherwise. So a prompt stays small iff its label maps to the
    small tier, or its margin is below m: keep iff ``-margin > -m``. A threshold t on this score
    is the margin ``m = -t``.
    """
    return math.inf if label in small_labels else -margin


def margin_from_threshold(threshold: float) -> float:
    """``min_margin`` for a threshold chosen on ``classifier_keep_score`` (never negative: a
    negative margin is the same policy as 0, which abstains on nothing)."""
    return max(0.0, -threshold)
