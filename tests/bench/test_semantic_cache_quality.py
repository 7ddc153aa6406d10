"""The cross-validation in benchmarks/semantic_cache_quality.py is honest: every pair is held out
exactly once, folds keep categories apart or whole, and the fit sees only training pairs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "semantic_cache_quality.py"
    spec = importlib.util.spec_from_file_location("semantic_cache_quality_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _pairs(bench: ModuleType) -> list:
    rng = np.random.default_rng(0)
    cats = ["paraphrase", "near_repeat", "negation", "scope"]
    out = []
    for i in range(80):
        cat = cats[i % 4]
        same = cat in ("paraphrase", "near_repeat")
        cos = float(rng.uniform(0.8, 1.0) if same else rng.uniform(0.6, 0.9))
        out.append(bench.Pair(cat, same, cos, clean=same and i % 3 == 0, add=i % 3 == 1, swap=i % 3 == 2, text=str(i)))
    return out


@pytest.mark.parametrize("by_category", [False, True])
def test_each_pair_is_held_out_once(bench: ModuleType, by_category: bool) -> None:
    pairs = _pairs(bench)
    folds = bench._folds(pairs, 5, by_category, seed=1)
    held = sorted(i for f in folds for i in f)
    assert held == list(range(len(pairs)))
    if by_category:
        assert all(len({pairs[i].category for i in f}) == 1 for f in folds)
    else:
        assert len(folds) == 5 and max(map(len, folds)) - min(map(len, folds)) <= 1
        assert all(len({pairs[i].category for i in f}) == 4 for f in folds)  # stratified


def test_fit_keeps_training_traps_in_budget(bench: ModuleType) -> None:
    pairs = _pairs(bench)
    thr, add, swap = bench._fit(pairs, cosine_only=False, budget=0.0)
    served = bench._served(pairs, np.array([thr]), np.array([add]), np.array([swap]))[:, 0]
    assert not any(s and not p.same for s, p in zip(served, pairs, strict=True))
    assert any(s and p.same for s, p in zip(served, pairs, strict=True))


def test_the_fit_never_sees_the_held_out_fold(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = _pairs(bench)
    folds = bench._folds(pairs, 4, False, seed=2)
    seen: list[set[str]] = []
    real_fit = bench._fit

    def spy(train: list, cosine_only: bool, budget: float = 0.0, margin: bool = True) -> tuple[float, float, float]:
        seen.append({p.text for p in train})
        return real_fit(train, cosine_only, budget, margin)

    monkeypatch.setattr(bench, "_fit", spy)
    bench._held_out(pairs, 4, False, 2, 0.0)
    for k, fold in enumerate(folds):
        held = {pairs[i].text for i in fold}
        assert not held & seen[2 * k] and not held & seen[2 * k + 1]  # cosine-only, then guard


def test_a_slack_no_training_repeat_needs_sits_midway_not_off(bench: ModuleType) -> None:
    # Repeats pass the guard clean; the traps differ by one replaced word at cosine 0.85. The
    # strictest tied swap slack turns it off (1.00); the max-margin one sits between the trap and
    # the top of the grid, and still serves no training trap.
    pairs = [bench.Pair("near_repeat", True, 0.95, clean=True, add=False, swap=False, text=f"r{i}") for i in range(10)]
    pairs += [bench.Pair("negation", False, 0.85, clean=False, add=False, swap=True, text=f"t{i}") for i in range(10)]
    _, _, strict = bench._fit(pairs, cosine_only=False, budget=0.0, margin=False)
    thr, add, swap = bench._fit(pairs, cosine_only=False, budget=0.0)
    assert strict == 1.0
    assert 0.85 < swap < 1.0
    served = bench._served(pairs, np.array([thr]), np.array([add]), np.array([swap]))[:, 0]
    assert served[:10].all() and not served[10:].any()
