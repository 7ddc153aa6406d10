"""The prefill attention path: raced at start under "auto", an explicit setting wins, SDPA where
the kernel cannot run."""

from __future__ import annotations

import pytest
import torch

from blink.engine.attention_dispatch import RaceResult, choose_prefill_attention, race_prefill_attention
from blink.engine.errors import EngineError
from blink.engine.kernels.attention import prefill_kernel_available


def _never() -> RaceResult:
    raise AssertionError("the race must not run for this setting")


def test_auto_keeps_the_race_winner() -> None:
    assert choose_prefill_attention("auto", True, lambda: RaceResult(kernel_ms=2.0, sdpa_ms=5.0)) == (
        "kernel", RaceResult(2.0, 5.0))
    choice, result = choose_prefill_attention("auto", True, lambda: RaceResult(kernel_ms=5.0, sdpa_ms=2.0))
    assert choice == "sdpa" and result is not None and result.sdpa_ms == 2.0


def test_an_explicit_setting_wins_without_a_race() -> None:
    assert choose_prefill_attention("kernel", True, _never) == ("kernel", None)
    assert choose_prefill_attention("sdpa", True, _never) == ("sdpa", None)


def test_sdpa_where_the_kernel_cannot_run() -> None:
    assert choose_prefill_attention("kernel", False, _never) == ("sdpa", None)
    assert choose_prefill_attention("auto", False, _never) == ("sdpa", None)


def test_an_unknown_setting_is_an_error() -> None:
    with pytest.raises(EngineError, match="prefill_attention"):
        choose_prefill_attention("flash", True, _never)


@pytest.mark.skipif(not prefill_kernel_available(), reason="blink::prefill_attention_cpu needs AVX512-BF16")
def test_the_race_times_both_paths_on_the_models_head_shape() -> None:
    threads = torch.get_num_threads()
    result = race_prefill_attention(heads=9, kv_heads=3, head_dim=64, tokens=64, reps=1)
    assert 0 < result.kernel_ms < 10_000 and 0 < result.sdpa_ms < 10_000
    assert result.winner in ("kernel", "sdpa")
    assert torch.get_num_threads() == threads
