"""The int8 GEMM of int8-w8a8's linears is chosen by CPU class, and an explicit setting wins."""

from __future__ import annotations

import pytest

from blink.engine.cpu_features import CpuFeatures
from blink.engine.errors import EngineError
from blink.engine.w8a8_gemm_dispatch import W8A8_GEMM_SETTINGS, choose_w8a8_gemm

AMX = CpuFeatures("Intel Xeon", frozenset({"amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f"}), 2)
AMX_BF16_ONLY = CpuFeatures("hypothetical", frozenset({"amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f"}), 2)
EPYC = CpuFeatures("AMD EPYC", frozenset({"avx512_bf16", "avx512_vnni", "avx512f"}), 2)


def test_auto_takes_onednn_on_amx_int8_and_int_mm_elsewhere() -> None:
    assert choose_w8a8_gemm("auto", AMX, onednn_usable=True) == "onednn"
    assert choose_w8a8_gemm("auto", EPYC, onednn_usable=True) == "int_mm"
    # The int8 tiles are what the matmul primitive would use: AMX without them is "elsewhere".
    assert choose_w8a8_gemm("auto", AMX_BF16_ONLY, onednn_usable=True) == "int_mm"


def test_an_explicit_setting_wins_over_the_cpu_class() -> None:
    assert choose_w8a8_gemm("int_mm", AMX, onednn_usable=True) == "int_mm"
    assert choose_w8a8_gemm("onednn", EPYC, onednn_usable=True) == "onednn"


def test_int_mm_where_onednn_cannot_serve() -> None:
    for setting in W8A8_GEMM_SETTINGS:
        assert choose_w8a8_gemm(setting, AMX, onednn_usable=False) == "int_mm"


def test_an_unknown_setting_is_an_error() -> None:
    with pytest.raises(EngineError, match="w8a8_gemm"):
        choose_w8a8_gemm("amx", AMX, onednn_usable=True)
