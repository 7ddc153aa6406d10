"""The prefill attention kernel is chosen by CPU class, and an explicit setting wins."""

from __future__ import annotations

import pytest

from blink.engine.attention_dispatch import choose_prefill_attention
from blink.engine.cpu_features import CpuFeatures
from blink.engine.errors import EngineError

AMX = CpuFeatures("Intel Xeon", frozenset({"amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f"}), 2)
EPYC = CpuFeatures("AMD EPYC", frozenset({"avx512_bf16", "avx512_vnni", "avx512f"}), 2)


def test_auto_takes_sdpa_on_amx_and_the_kernel_elsewhere() -> None:
    assert choose_prefill_attention("auto", AMX, kernel_usable=True) == "sdpa"
    assert choose_prefill_attention("auto", EPYC, kernel_usable=True) == "kernel"


def test_an_explicit_setting_wins_over_the_cpu_class() -> None:
    assert choose_prefill_attention("kernel", AMX, kernel_usable=True) == "kernel"
    assert choose_prefill_attention("sdpa", EPYC, kernel_usable=True) == "sdpa"


def test_sdpa_where_the_kernel_cannot_run() -> None:
    assert choose_prefill_attention("kernel", EPYC, kernel_usable=False) == "sdpa"
    assert choose_prefill_attention("auto", EPYC, kernel_usable=False) == "sdpa"


def test_an_unknown_setting_is_an_error() -> None:
    with pytest.raises(EngineError, match="prefill_attention"):
        choose_prefill_attention("flash", EPYC, kernel_usable=True)
