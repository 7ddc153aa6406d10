"""Threshold calibration for the cascade and the classifier: splits, rates, choice, and that the
classifier's score reproduces what ClassifierPolicy actually does with a margin."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blink.backends.base import GenerationRequest, Load, SamplingOptions
from blink.gateway.router.calibration import (
    Outcome,
    choose_threshold,
    classifier_keep_score,
    margin_from_threshold,
    rates,
    split,
)
from blink.gateway.router.classifier import CentroidClassifier, ClassifierPolicy
from blink.gateway.router.policy import TierView


def test_split_is_stable_disjoint_and_independent_of_order() -> None:
    items = [f"prompt {i}" for i in range(400)]
    cal, held = split(items, key=str)
    assert sorted(cal + held) == sorted(items) and not set(cal) & set(held)
    assert 150 < len(held) < 250  # a hash, not a coin per run: roughly half
    cal2, held2 = split(list(reversed(items)), key=str)
    assert set(cal2) == set(cal) and set(held2) == set(held)
    # Adding items never moves the old ones.
    cal3, held3 = split(items + ["another"], key=str)
    assert set(held) <= set(held3) and set(cal) <= set(cal3)


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, 2.0])
def test_split_refuses_degenerate_shares(share: float) -> None:
    with pytest.raises(ValueError):
        split(["a"], key=str, held_out_share=share)


def test_rates_count_each_side() -> None:
    outcomes = [Outcome(-0.1, True), Outcome(-0.5, True), Outcome(-0.9, False), Outcome(-0.2, False)]
    r = rates(outcomes, -0.3)
    assert (r.kept_ok, r.escalated_wrong, r.escalated) == (0.5, 0.5, 0.5)
    assert r.balanced_accuracy == 0.5 and r.n == 4


def test_a_separable_set_gets_a_threshold_between_the_classes() -> None:
    outcomes = [Outcome(s, True) for s in (-0.1, -0.2, -0.3)] + [Outcome(s, False) for s in (-1.0, -1.5, -0.8)]
    best = choose_threshold(outcomes)
    assert -0.8 < best.threshold < -0.3 and best.threshold == pytest.approx(-0.55)
    assert best.balanced_accuracy == 1.0


def test_an_uninformative_score_keeps_everything() -> None:
    """Where no threshold beats keeping everything, the cheapest policy wins the tie."""
    outcomes = [Outcome(-0.5, True), Outcome(-0.5, False), Outcome(-0.2, True), Outcome(-0.2, False)]
    best = choose_threshold(outcomes)
    assert best.escalated == 0.0 and best.balanced_accuracy == 0.5


def test_balanced_accuracy_is_not_fooled_by_a_lopsided_set() -> None:
    # 9 right, 1 wrong; the wrong one has the lowest score: catching it is worth one whole side.
    outcomes = [Outcome(-0.1 * i, True) for i in range(1, 10)] + [Outcome(-2.0, False)]
    best = choose_threshold(outcomes)
    assert best.escalated_wrong == 1.0 and best.kept_ok == 1.0


@pytest.mark.parametrize("outcomes", [[], [Outcome(0.0, True)], [Outcome(0.0, False), Outcome(1.0, False)],
                                      [Outcome(math.inf, True), Outcome(math.inf, False)]])
def test_choose_refuses_what_cannot_be_calibrated(outcomes: list[Outcome]) -> None:
    with pytest.raises(ValueError):
        choose_threshold(outcomes)


def test_infinite_scores_are_always_kept() -> None:
    outcomes = [Outcome(math.inf, False), Outcome(-0.5, True), Outcome(-0.1, False)]
    best = choose_threshold(outcomes)
    assert rates(outcomes, best.threshold).n == 3
    assert math.isfinite(best.threshold)


def _embed(texts: list[str]) -> np.ndarray:
    # Two directions: "easy" texts point one way, "hard" the other; the word count tilts them.
    rows = []
    for t in texts:
        w = len(t.split())
        rows.append([1.0, 0.1 * w] if "easy" in t else [0.1 * w, 1.0])
    return np.asarray(rows, dtype=np.float32)


async def test_classifier_score_predicts_what_the_policy_does() -> None:
    """For every prompt and margin, 'kept on small' by the score equals the policy's real route
    (its label's tier, or the default cheapest tier when it abstains)."""
    classifier = CentroidClassifier(_embed, {"simple": ["easy"], "complex": ["hard"]})
    tiers = [TierView("small", 0, Load(), 1, 1), TierView("large", 1, Load(), 1, 1)]
    prompts = ["easy one", "easy a b c d e f", "hard", "hard x y", "hard a b c d e f g h i j k"]
    for min_margin in (0.0, 0.05, 0.2, 0.6, 2.0):
        policy = ClassifierPolicy(classifier, {"simple": "small", "complex": "large"}, min_margin, offload=False)
        threshold = -min_margin
        assert margin_from_threshold(threshold) == min_margin
        for p in prompts:
            req = GenerationRequest(request_id="r", model="auto", kind="chat", options=SamplingOptions(),
                                    messages=[{"role": "user", "content": p}])
            route = await policy.choose(req, tiers)
            served = route.tier if route is not None else "small"  # abstained: the default tier
            label, margin = classifier.classify(p)
            keep = classifier_keep_score(label, margin, frozenset({"simple"})) >= threshold
            assert keep == (served == "small") or math.isclose(margin, min_margin), (p, min_margin)


def test_a_negative_threshold_is_margin_zero() -> None:
    assert margin_from_threshold(0.3) == 0.0 and margin_from_threshold(-0.25) == 0.25


def test_the_route_settings_and_the_policy_share_the_calibrated_default() -> None:
    from blink.config.routing import CascadeSettings
    from blink.gateway.router.cascade import CascadeConfig

    settings, config = CascadeSettings(), CascadeConfig()
    assert (settings.probe_tokens, settings.min_mean_logprob) == (config.probe_tokens, config.min_mean_logprob)
