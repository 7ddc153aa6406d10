"""Which int8 GEMM serves ``int8-w8a8``'s many-row linears, by CPU class.

``torch._int_mm`` runs through oneDNN's gemm API, which has VNNI kernels but no AMX one; oneDNN's
int8 matmul primitive (reached through torch's x86 quantization ops, kernels/w8a8.py) runs on the
AMX tiles where the CPU has AMX-INT8, and on VNNI elsewhere. Both give the same bits, so the
choice is speed alone: on a CPU without AMX (VNNI) the matmul primitive was a little slower than
``_int_mm`` at every prefill shape (benchmarks/RESULTS.md, "int8 GEMM routes for W8A8 prefill"),
so ``_int_mm`` stays there; AMX-INT8 CPUs take the matmul primitive, the only int8 route that
reaches their tiles (its speed there is to be confirmed with the same benchmark). The choice is made once, at
engine start, and logged; ``w8a8_gemm`` in EngineConfig overrides it (A/B runs:
benchmarks/int8_gemm_routes.py times both routes alone).
"""

from __future__ import annotations

from typing import Literal

from blink.engine.cpu_features import CpuFeatures
from blink.engine.errors import EngineError

W8A8Gemm = Literal["int_mm", "onednn"]
W8A8_GEMM_SETTINGS = ("auto", "int_mm", "onednn")


def choose_w8a8_gemm(setting: str, cpu: CpuFeatures, onednn_usable: bool) -> W8A8Gemm:
    """``setting`` is "auto", "int_mm" or "onednn"; "onednn" where oneDNN's int8 matmul cannot
    serve (kernels/w8a8.onednn_w8a8_available) falls back to ``_int_mm``, which runs everywhere
    the W8A8 kernels do."""
    if setting not in W8A8_GEMM_SETTINGS:
        raise EngineError(f"w8a8_gemm must be one of {W8A8_GEMM_SETTINGS}, got {setting!r}")
    if not onednn_usable or setting == "int_mm":
        return "int_mm"
    if setting == "onednn":
        return "onednn"
    return "onednn" if "amx_int8" in cpu.flags else "int_mm"
