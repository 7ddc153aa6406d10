"""From how many rows a decode step leaves the fused int8 step for oneDNN's GEMMs, by CPU class.

Blink's fused decode step (kernels/decode_step.py) and its int8 GEMV widen int8 weights to bf16
for AVX-512 dot products: built for the few rows of interactive decode, which is bandwidth bound.
With many concurrent streams a step turns compute bound, and on a CPU with AMX oneDNN's GEMMs run
on the AMX tiles: the packed bf16 weight ``int8-dense-prefill`` keeps, or ``int8-w8a8``'s
``torch._int_mm``. On AMX CPUs decode-only steps of at least ``rows`` rows therefore run eagerly
with every linear on that GEMM; elsewhere (AVX-512 without AMX) the fused step stays ahead up to
its own row limit, measured (decode_step.MAX_ROWS), so the default there is what it was. The
choice is made once, at engine start, and logged; ``decode_gemm_rows`` in EngineConfig overrides
it (A/B runs: benchmarks/cpu_class_profile.py).

Verification spans (1 + K tokens of one sequence) stay on the fused step at every width: it
rounds each row as the one-row decode does, which keeps greedy output with speculation identical
to without it. Modes without a GEMM weight (``none``, ``int8``) are untouched.
"""

from __future__ import annotations

from blink.engine.cpu_features import CpuFeatures
from blink.engine.errors import EngineError

# The AMX crossover, from benchmarks/cpu_class_profile.py's row sweep of one step's linears on an
# AMX Xeon (figures in benchmarks/RESULTS.md): the int8 GEMV's cost grows with the rows while the
# AMX GEMMs' stays flat, and they meet between 4 and 8 rows.
AMX_GEMM_ROWS = 8


def choose_decode_gemm_rows(setting: int, cpu: CpuFeatures, fused_max_rows: int) -> int:
    """Fewest rows of a decode-only step served by the GEMM path: ``setting`` when positive
    (0 = by CPU class), else AMX_GEMM_ROWS on AMX CPUs and one past the fused step's limit
    elsewhere (i.e. the fused step keeps every step it serves)."""
    if setting < 0:
        raise EngineError(f"decode_gemm_rows must be 0 (by CPU class) or a row count, got {setting}")
    if setting:
        return setting
    return AMX_GEMM_ROWS if cpu.amx else fused_max_rows + 1
