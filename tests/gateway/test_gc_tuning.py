"""The gateway's GC settings: start-up objects frozen, gen-0 collections rarer, the rest kept."""

from __future__ import annotations

import gc

from blink.gateway.gc_tuning import GEN0_THRESHOLD, tune_gc


def test_tune_gc_freezes_startup_objects_and_raises_gen0_only() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GEN0_THRESHOLD, before[1], before[2])
        assert GEN0_THRESHOLD > before[0]
    finally:
        gc.unfreeze()  # the test process keeps collecting as before
        gc.set_threshold(*before)
